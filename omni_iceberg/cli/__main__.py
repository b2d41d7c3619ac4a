"""``python -m omni_iceberg.cli``: the same as the ``omni`` command."""

import sys

from omni_iceberg.cli import main

sys.exit(main())
