"""The ``silo`` command line: ``run``, ``status``, ``dashboard``, ``demo`` (also ``python -m silo``).

``commands`` parses arguments and dispatches; ``arguments`` holds the shared parsers;
``log_format`` sets up text or JSON logs; ``status`` renders a table; ``dashboard`` serves the
web page; ``demo``, ``demo_report`` and ``local_cluster`` are the main job.
May import every other part; nothing imports it (the ``silo`` entry point calls ``main``).
"""

import os

# gRPC's C core reads GRPC_VERBOSITY once, when grpc is first imported (the commands import it
# for TLS), and logs connection chatter (e.g. GOAWAY from a peer that stopped) at INFO to
# stderr: keep a silo's log to its own lines (plain JSON with --log-format json) unless the
# user asks otherwise.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from silo.cli.commands import main  # after the default above: this import loads grpc

__all__ = ["main"]
