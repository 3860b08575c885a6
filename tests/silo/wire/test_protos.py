"""The committed generated modules in ``silo/wire/proto/`` match the ``.proto`` there (regenerated here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from membership_tables import SiloStatus
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "silo" / "wire" / "proto"


def generated_files(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): path.read_text()
        for path in sorted(directory.rglob("*.py*"))
        if "__pycache__" not in path.parts
    }


def test_committed_generated_code_is_current(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_protos.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    fresh, committed = generated_files(tmp_path), generated_files(COMMITTED)
    assert fresh, "the generator wrote nothing"
    stale = sorted(name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))
    assert not stale, (
        f"silo/wire/proto is out of date ({', '.join(stale)}): run python scripts/generate_protos.py and commit"
    )


def test_wire_statuses_mirror_the_model() -> None:
    assert {status.name: int(status) for status in SiloStatus} == {
        pb.SiloStatus.Name(number).removeprefix("SILO_STATUS_"): number for number in pb.SiloStatus.values()
    }


TYPED_METHODS: list[codec.Method[Any, Any] | codec.StreamMethod[Any, Any] | codec.BidiStreamMethod[Any, Any]] = [
    codec.PING,
    codec.PROBE_INDIRECTLY,
    codec.GOSSIP,
    codec.GET_MEMBERSHIP,
    codec.CONFIRM_MEMBERSHIP,
    codec.WATCH_MEMBERSHIP,
    codec.PING_STREAM,
    codec.GOSSIP_STREAM,
    codec.DRAIN,
    codec.PROCESS,
]


def test_every_rpc_of_every_service_has_a_typed_method() -> None:
    declared = {method.path: method for method in TYPED_METHODS}
    services = pb.DESCRIPTOR.services_by_name.values()
    in_proto = {f"/{service.full_name}/{rpc.name}": rpc for service in services for rpc in service.methods}
    assert set(declared) == set(in_proto)
    for path, method in declared.items():
        descriptor = in_proto[path]
        assert method.request.DESCRIPTOR.full_name == descriptor.input_type.full_name
        assert method.response.DESCRIPTOR.full_name == descriptor.output_type.full_name
        assert isinstance(method, codec.StreamMethod | codec.BidiStreamMethod) == descriptor.server_streaming
        assert isinstance(method, codec.BidiStreamMethod) == descriptor.client_streaming
