"""Terminal and picture helpers shared by every action: progress bars, tables, DAG drawings."""
