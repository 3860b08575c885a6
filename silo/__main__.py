"""``python -m silo ...`` is the ``silo`` command."""

import sys

from silo.cli import main

sys.exit(main())
