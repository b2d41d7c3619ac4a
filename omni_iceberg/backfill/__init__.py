"""Backfills: plan the minimal closure, fuse, route, execute, commit once, record lineage."""
