"""The main job (`omni demo`) and the real corpora it ingests, fetched from Debian/PyPI packages."""
