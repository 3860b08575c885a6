"""``benchmarks.write_log``: the triggers log a real PostgreSQL table's writes, and a removal is read from them."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import psycopg

from benchmarks import write_log
from membership_tables import MembershipEntry, MembershipTable, SiloStatus, open_table
from membership_tables.testing.checks import make_entry
from testbed.services.postgres import PostgresServer


def _row(table: MembershipTable, entry: MembershipEntry) -> tuple[MembershipEntry, str]:
    found = table.read_all().get(entry.silo_address)
    assert found is not None
    return found


def test_a_removal_counts_the_writes_of_the_victims_rows_and_the_versions_between(
    postgres_server: PostgresServer,
) -> None:
    database = f"log_{uuid.uuid4().hex[:10]}"
    table = open_table(postgres_server.create_database(database), "logged")
    table.initialize()
    connection = psycopg.connect(
        host=str(postgres_server.socket_dir), port=postgres_server.port, user="postgres", dbname=database,
        autocommit=True,
    )  # fmt: skip
    try:
        write_log.install(connection)
        voter, other, victim, second = (make_entry(port) for port in (1, 2, 3, 4))
        for entry in (voter, other, victim, second):
            assert table.insert_row_at_next_version(entry) is not None
        killed_at = time.time()
        table.update_i_am_alive(victim.silo_address, datetime.now(UTC))  # a heartbeat: no version, not logged
        now = datetime.now(UTC)
        voted = [(row.replace(suspect_times=((voter.silo_address, now),)), etag)
                 for row, etag in (_row(table, victim), _row(table, second))]  # fmt: skip
        version = table.read_all().version
        assert table.update_rows_with_etags(voted, version.next()) is not None  # two votes, one version
        assert table.update_rows_with_etags(voted, version.next()) is None  # lost race: rolled back, not logged
        row, etag = _row(table, other)
        assert table.update_row_at_next_version(row.replace(status=SiloStatus.SHUTTING_DOWN), etag) is not None
        deaths = [
            (row.replace(status=SiloStatus.DEAD, suspect_times=(*row.suspect_times, (other.silo_address, now))), etag)
            for row, etag in (_row(table, victim), _row(table, second))
        ]
        assert table.update_rows_with_etags(deaths, table.read_all().version.next()) is not None
        writes = write_log.writes_since(connection, killed_at)
    finally:
        connection.close()
        table.close()

    assert [write.version for write in writes] == [5, 6, 7]  # versions 1-4: the inserts before the kill
    one = write_log.removal(writes, str(victim.silo_address), killed_at)
    assert (one["dead"], one["versions"], one["span_versions"], one["dead_version"]) == (True, 2, 3, 7)
    assert [(w["status"], w["votes"], w["rows"]) for w in one["writes"]] == [("ACTIVE", 1, 2), ("DEAD", 2, 2)]
    both = write_log.removals(writes, [str(victim.silo_address), str(second.silo_address)], killed_at)
    assert both["all_dead"] is True
    assert (both["span_versions"], both["victim_versions"], both["dead_write_versions"]) == (3, 2, 1)
    assert both["versions_per_removal"] == [2, 2]
    alive = write_log.removal(writes, str(voter.silo_address), killed_at)
    assert (alive["dead"], alive["versions"], alive["span_versions"]) == (False, 0, 3)
