"""A silo without pyarrow says so when it starts, naming the extra, and refuses columnar batches clearly.

pyarrow is installed in the test environment, so the silo's own process blocks it before anything
imports it (``sys.modules["pyarrow"] = None``: every import of it then fails as if it were not
installed); the test process keeps its pyarrow to send the batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

from silo.work.client import SyncWorkClient, WorkError
from silo.work.handlers import CHECKSUM_HANDLER, checksum
from testbed.cluster_harness import START_TIMEOUT, SiloProcess
from testbed.services.process import wait_until

pytestmark = pytest.mark.slow

CLUSTER = "no-pyarrow"
WITHOUT_PYARROW = "import sys; sys.modules['pyarrow'] = None; from silo.cli import main; sys.exit(main())"
WARNING = "will refuse columnar Work batches"


def test_a_silo_without_pyarrow_warns_at_start_up_and_still_serves_items(tmp_path: Path) -> None:
    table = f"sqlite:///{tmp_path / 'm.db'}"
    argv = [sys.executable, "-c", WITHOUT_PYARROW, "run", "--table", table, "--cluster", CLUSTER, "--preset", "local"]
    silo = SiloProcess(argv, tmp_path / "silo.log")
    try:
        address = silo.wait_listening()
        wait_until(lambda: "is active" in silo.log_text(), START_TIMEOUT, "the silo Active", silo.log)
        text = silo.log_text()
        (warning,) = [line for line in text.splitlines() if WARNING in line]
        assert " WARNING " in warning
        assert "pip install 'silo-membership[serve-spark]'" in warning
        assert text.index(WARNING) < text.index("is active")  # at start-up, before any batch could come

        batch = pa.RecordBatch.from_arrays([pa.array(["k1"]), pa.array([1])], names=["key", "value"])
        with SyncWorkClient(CLUSTER, sender="test") as client:
            with pytest.raises(WorkError, match=r"silo-membership\[serve-spark\]") as refused:
                client.submit_columnar(address, CHECKSUM_HANDLER, batch, 30.0).result()
            assert refused.value.code == "INVALID_ARGUMENT"
            assert client.process(address, CHECKSUM_HANDLER, [("k1", b"one")], 30.0) == [checksum("k1", b"one")]
    finally:
        silo.close()


def test_a_silo_with_pyarrow_does_not_warn(tmp_path: Path) -> None:
    table = f"sqlite:///{tmp_path / 'm.db'}"
    argv = [sys.executable, "-m", "silo", "run", "--table", table, "--cluster", CLUSTER, "--preset", "local"]
    silo = SiloProcess(argv, tmp_path / "silo.log")
    try:
        silo.wait_listening()
        wait_until(lambda: "is active" in silo.log_text(), START_TIMEOUT, "the silo Active", silo.log)
        assert WARNING not in silo.log_text()
    finally:
        silo.close()
