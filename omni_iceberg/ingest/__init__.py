"""Add rows: read sources, map fields, make ids, deduplicate, write, then commit."""
