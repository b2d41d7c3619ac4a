"""Java from Python at run time: verified Maven jars (:mod:`.downloads`, :mod:`.maven_lock`) and a JDK finder (:mod:`.java`).

The Spark engine fetches its session jars and compiles omni's session extension with
these; the id index runs HBase's own ``RegionSplitter`` with them. Fetching and starting
the servers the tests use is not here: see ``tests/toolchain``.
"""
