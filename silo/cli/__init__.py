"""The ``silo`` command line: ``run``, ``status``, ``dashboard``, ``demo`` (also ``python -m silo``).

``commands`` parses arguments and dispatches; ``arguments`` holds the shared parsers;
``log_format`` sets up text or JSON logs; ``status`` renders a table; ``dashboard`` serves the
web page; ``demo``, ``demo_report`` and ``local_cluster`` are the main job.
May import every other part; nothing imports it (the ``silo`` entry point calls ``main``).
"""

from silo.cli.commands import main

__all__ = ["main"]
