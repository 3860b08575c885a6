"""The ``silo`` command line: ``run``, ``status``, ``demo`` (also ``python -m silo``).

``commands`` parses arguments and dispatches; ``arguments`` holds the shared parsers;
``status`` renders a table; ``demo``, ``demo_report`` and ``local_cluster`` are the main job.
May import every other part; nothing imports it (the ``silo`` entry point calls ``main``).
"""

from silo.cli.commands import main

__all__ = ["main"]
