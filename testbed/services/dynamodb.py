"""A throwaway ``moto_server`` (moto's standalone DynamoDB-compatible server) for tests.

Run as ``python -m testbed.services.dynamodb PORT`` this module *is* that server: moto's own
WSGI application (what ``moto_server`` serves) on werkzeug, but with one request thread.
``moto_server`` serves requests on many threads, and moto's DynamoDB model is not safe
for that: ``TransactWriteItems`` checks conditions, writes, and on cancellation restores a
deep copy of the whole table, so two concurrent requests can both win a condition or undo
each other's committed writes. Real DynamoDB is atomic per item and per transaction;
serialising requests gives moto that behaviour.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from testbed.services.process import ServerProcess, free_port, port_is_open, wait_until

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

REPO_ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "aws_session_token": "testing"}
"""Dummy credentials: moto accepts any, and passing them as table options keeps them out of os.environ."""


class MotoServer:
    """``moto_server`` on 127.0.0.1, its log in a temp directory.

    ``stop()`` and ``start()`` restart it on the same port to simulate an outage. moto keeps
    everything in memory, so a restart loses every table and item: re-``initialize()`` after.
    """

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log = workdir / "moto.log"
        self._process: ServerProcess | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def options(self) -> dict[str, Any]:
        """Options for ``open_table``: dummy credentials (no environment variables needed)."""
        return dict(CREDENTIALS)

    def client(self) -> DynamoDBClient:
        """A plain boto3 client on this server, to look at items as an admin would."""
        return boto3.client(
            "dynamodb",
            region_name=REGION,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=CREDENTIALS["aws_secret_access_key"],
            aws_session_token=CREDENTIALS["aws_session_token"],
        )

    def uri(self, table_name: str) -> str:
        return f"dynamodb://{table_name}?region={REGION}&endpoint_url={self.endpoint_url}"

    def start(self) -> None:
        argv = [sys.executable, "-m", "testbed.services.dynamodb", str(self.port)]
        pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        self._process = ServerProcess(argv, self.log, env={"PYTHONPATH": pythonpath})
        wait_until(lambda: port_is_open(self.port), 30, f"moto_server on port {self.port}", self.log)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One ``moto_server`` for the test session; see ``MotoServer`` (a restart loses all data)."""
    with tempfile.TemporaryDirectory(prefix="moto-") as workdir:
        server = MotoServer(Path(workdir))
        server.start()
        try:
            yield server
        finally:
            server.stop()


def serve(port: int) -> None:
    """Serve moto's DynamoDB (and the rest of moto) on 127.0.0.1:``port``, one request at a time."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
