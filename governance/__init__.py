"""Background re-layout of the physical family, invisible to readers.

Every operation is Prepare-Execute-Commit: prepare a plan you can print, execute it on
private staging branches (readers keep reading their pinned logical version), commit
it as ONE logical version that re-pins the rewritten snapshots.
"""
