"""Explore: logical SQL rewritten to the physical tables it needs, run locally or on Spark;
reproducible filtered export; every query recorded in the query log."""
