"""Rendering ``silo status``: the text table for people and the exact JSON shape for scripts."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import silo
from membership_tables import MalformedRow, MembershipTableData, SiloAddress, SiloStatus, TableVersion
from silo.cli.status import format_age, render_json, render_text
from tests.silo.rpc_fakes import T0, entry

A = SiloAddress("127.0.0.1", 40123, 1767225600123)
B = SiloAddress("127.0.0.1", 40124, 1767225600456)


def snapshot() -> MembershipTableData:
    active = entry(
        A,
        SiloStatus.ACTIVE,
        silo_name="alpha",
        proxy_port=30000,
        i_am_alive_time=T0 + timedelta(seconds=9),
        properties={"zone": "eu-1", "rack": "r7"},
    )
    dead = entry(
        B,
        SiloStatus.DEAD,
        silo_name="beta",
        suspect_times=((A, T0 + timedelta(seconds=8, milliseconds=250)),),
    )
    return MembershipTableData(((dead, "e2"), (active, "e1")), TableVersion(7, "v"))


def test_json_has_exactly_the_documented_shape() -> None:
    assert json.loads(render_json("prod", snapshot())) == {
        "cluster": "prod",
        "version": 7,
        "silo_membership_version": silo.__version__,
        "silos": [
            {
                "address": "127.0.0.1:40123@1767225600123",
                "name": "alpha",
                "status": "ACTIVE",
                "proxy_port": 30000,
                "start_time": "2026-01-01T00:00:00.000000+00:00",
                "i_am_alive_time": "2026-01-01T00:00:09.000000+00:00",
                "suspicions": [],
                "properties": {"zone": "eu-1", "rack": "r7"},
            },
            {
                "address": "127.0.0.1:40124@1767225600456",
                "name": "beta",
                "status": "DEAD",
                "proxy_port": 0,
                "start_time": "2026-01-01T00:00:00.000000+00:00",
                "i_am_alive_time": "2026-01-01T00:00:00.000000+00:00",
                "suspicions": [{"by": "127.0.0.1:40123@1767225600123", "at": "2026-01-01T00:00:08.250000+00:00"}],
                "properties": {},
            },
        ],
    }


def test_text_is_aligned_columns_with_ages_and_who_suspected_whom() -> None:
    text = render_text("prod", snapshot(), now=T0 + timedelta(seconds=10))
    assert text.splitlines() == [
        "cluster prod  version 7  (1 active, 1 dead)",
        "ADDRESS                        NAME   STATUS  LAST I-AM-ALIVE            PROPERTIES         SUSPICIONS",
        "127.0.0.1:40123@1767225600123  alpha  ACTIVE  00:00:09.000Z (1.0s ago)   rack=r7,zone=eu-1  -",
        "127.0.0.1:40124@1767225600456  beta   DEAD    00:00:00.000Z (10.0s ago)  -                  "
        "127.0.0.1:40123@1767225600123 at 00:00:08.250Z (1.8s ago)",
    ]


def test_text_of_an_empty_cluster_says_so() -> None:
    assert (
        render_text("prod", MembershipTableData((), TableVersion(0, "")), now=T0)
        == "cluster prod  version 0  (no silos)"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.04, "0.0s ago"),
        (4.25, "4.2s ago"),
        (59.9, "59.9s ago"),
        (192, "3m12s ago"),
        (2 * 3600 + 5 * 60, "2h05m ago"),
        (3 * 86400 + 4 * 3600, "3d04h ago"),
        (-1.0, "1.0s ahead"),
    ],
)
def test_ages_read_naturally(seconds: float, text: str) -> None:
    assert format_age(seconds) == text


def test_malformed_rows_are_listed_in_text_and_json() -> None:
    bad = MalformedRow("znode /silo-membership/prod/10.0.0.9:1@1", "not valid JSON (Expecting value)")
    data = snapshot()
    reported = MembershipTableData(data.rows, data.version, (bad,))
    document = json.loads(render_json("prod", reported))
    assert document["malformed"] == [{"key": bad.key, "reason": bad.reason}]
    assert document["silos"] == json.loads(render_json("prod", data))["silos"]
    text = render_text("prod", reported, now=T0 + timedelta(seconds=10)).splitlines()
    assert text[-2:] == [
        "1 malformed row(s), skipped by every silo (repair or delete by hand):",
        "  znode /silo-membership/prod/10.0.0.9:1@1: not valid JSON (Expecting value)",
    ]
    alone = render_text("prod", MembershipTableData((), data.version, (bad,)), now=T0).splitlines()
    assert alone[0] == "cluster prod  version 7  (no silos)"
    assert alone[2] == f"  {bad}"
