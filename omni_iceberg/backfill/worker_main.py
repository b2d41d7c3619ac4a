"""``python -m omni_iceberg.backfill.worker_main``: the child side of ProcessWorker.

A module of its own so the classes it sends back pickle under their real module name.
"""

from omni_iceberg.backfill.worker import child_main

if __name__ == "__main__":
    child_main()
