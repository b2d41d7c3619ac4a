"""Explore: logical SQL rewritten to the physical tables it needs, run locally or on Spark;
reproducible filtered export; rows by id; every query recorded in the query log."""
