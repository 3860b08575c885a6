"""DynamoDB specifics beyond the conformance suite: URIs, layout, retries, malformed items."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from membership_tables import (
    InvalidTableUriError,
    MalformedRowError,
    SiloStatus,
    TableUnavailableError,
    TableVersion,
    open_table,
)
from membership_tables.dynamodb import (
    VERSION_KEY,
    DynamoDbMembershipTable,
    DynamoDbSettings,
    is_transient,
    new_numeric_etag,
    parse_etag,
    parse_uri,
)
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0
from testbed.services.dynamodb import CREDENTIALS, REGION, MotoServer
from testbed.services.process import free_port

# --- URIs and options (no server) ------------------------------------------------------------


def test_uri_with_region_and_endpoint() -> None:
    settings = parse_uri("dynamodb://membership.prod_1?region=eu-west-1&endpoint_url=http://127.0.0.1:8000")
    assert settings == DynamoDbSettings("membership.prod_1", "eu-west-1", "http://127.0.0.1:8000")


def test_options_override_defaults() -> None:
    settings = parse_uri("dynamodb://membership", retry_time=0.5, max_attempts=2, aws_access_key_id="id")
    assert (settings.retry_time, settings.max_attempts, settings.aws_access_key_id) == (0.5, 2, "id")


@pytest.mark.parametrize(
    ("uri", "options", "message"),
    [
        ("dynamodb://", {}, "names no table"),
        ("dynamodb://?region=eu-west-1", {}, "names no table"),
        ("dynamodb://ab", {}, "invalid DynamoDB table name 'ab'"),
        ("dynamodb://bad*name", {}, "invalid DynamoDB table name"),
        ("dynamodb://user@membership", {}, "invalid DynamoDB table name"),
        ("dynamodb://membership/extra", {}, "expected 'dynamodb://TABLE"),
        ("dynamodb://membership?regoin=eu-west-1", {}, "unknown query parameter(s) ['regoin']"),
        ("dynamodb://membership?region=a&region=b", {}, "must be given once"),
        ("dynamodb://membership?region=", {}, "must be given once, with a value"),
        ("dynamodb://membership?endpoint_url=localhost:8000", {}, "endpoint_url must be like"),
        ("dynamodb://membership", {"timeout": 1}, "unknown DynamoDB table option(s) ['timeout']"),
        ("dynamodb://membership", {"retry_time": 0}, "retry_time=0 is invalid"),
        ("dynamodb://membership", {"max_attempts": 1.5}, "max_attempts=1.5 is invalid"),
    ],
)
def test_bad_uri_is_refused_clearly(uri: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidTableUriError) as raised:
        open_table(uri, "cluster", **options)
    assert message in str(raised.value)


def test_missing_region_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    with pytest.raises(InvalidTableUriError, match=r"no AWS region .* add \?region=REGION"):
        open_table("dynamodb://membership", "cluster")


def test_region_comes_from_the_aws_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    monkeypatch.delenv("AWS_REGION", raising=False)
    with open_table("dynamodb://membership", "cluster", **CREDENTIALS) as table:
        assert isinstance(table, DynamoDbMembershipTable)
        assert table.region == "ap-south-1"


# --- pure helpers ------------------------------------------------------------------------------


def _client_error(code: str, status: int = 400, reasons: list[str] | None = None) -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    if reasons is not None:
        response["CancellationReasons"] = [{"Code": reason} for reason in reasons]
    return ClientError(response, "TransactWriteItems")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_client_error("ProvisionedThroughputExceededException"), True),
        (_client_error("ThrottlingException"), True),
        (_client_error("RequestLimitExceeded"), True),
        (_client_error("InternalServerError", 500), True),
        (_client_error("SomethingNew", 503), True),
        (_client_error("TransactionCanceledException", reasons=["None", "TransactionConflict"]), True),
        (_client_error("TransactionCanceledException", reasons=["ThrottlingError", "None"]), True),
        (_client_error("TransactionCanceledException", reasons=["ConditionalCheckFailed", "None"]), False),
        (_client_error("ValidationException"), False),
        (_client_error("AccessDeniedException"), False),
        (_client_error("ResourceNotFoundException"), False),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (ValueError("not a driver error"), False),
    ],
)
def test_which_failures_are_retried(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


@pytest.mark.parametrize(
    ("etag", "parsed"),
    [
        ("17", 17),
        ("9223372036854775807", 2**63 - 1),
        ("0", None),
        ("", None),
        ("-1", None),
        ("1e3", None),
        ("9223372036854775808", None),
        ("٣", None),
        ("3f2a9c1e5b7d4e0f8a6c2b1d9e7f5a3c", None),  # a hex token: not a number
    ],
)
def test_parse_etag(etag: str, parsed: int | None) -> None:
    assert parse_etag(etag) == parsed


def test_new_etags_are_positive_63_bit_and_distinct() -> None:
    etags = {new_numeric_etag() for _ in range(1000)}
    assert len(etags) == 1000
    assert all(0 < etag < 2**63 for etag in etags)


# --- against moto_server -------------------------------------------------------------------------


@pytest.fixture
def table_name() -> str:
    return f"backend-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def table(moto_server: MotoServer, table_name: str) -> Iterator[DynamoDbMembershipTable]:
    handle = open_table(moto_server.uri(table_name), "cluster-a", **moto_server.options)
    assert isinstance(handle, DynamoDbMembershipTable)
    handle.initialize()
    yield handle
    handle.close()


def _items(moto_server: MotoServer, table_name: str, cluster_id: str = "cluster-a") -> dict[str, dict[str, Any]]:
    """This cluster's items as `aws dynamodb query` prints them, by range key."""
    response = moto_server.client().query(
        TableName=table_name,
        KeyConditionExpression="cluster_id = :c",
        ExpressionAttributeValues={":c": {"S": cluster_id}},
        ConsistentRead=True,
    )
    return {item["silo"]["S"]: dict(item) for item in response["Items"]}


@pytest.mark.slow
def test_initialize_creates_an_on_demand_table(moto_server: MotoServer, table: DynamoDbMembershipTable) -> None:
    description = moto_server.client().describe_table(TableName=table.settings.table_name)["Table"]
    assert description["TableStatus"] == "ACTIVE"
    assert description.get("BillingModeSummary", {}).get("BillingMode") == "PAY_PER_REQUEST"
    assert {(k["AttributeName"], k["KeyType"]) for k in description["KeySchema"]} == {
        ("cluster_id", "HASH"),
        ("silo", "RANGE"),
    }
    table.initialize()  # idempotent on an existing table


@pytest.mark.slow
def test_reading_a_missing_table_says_to_initialize(moto_server: MotoServer, table_name: str) -> None:
    with (
        open_table(moto_server.uri(table_name), "cluster-a", **moto_server.options) as handle,
        pytest.raises(TableUnavailableError, match=r"call initialize\(\) to create it"),
    ):
        handle.read_all()


@pytest.mark.slow
def test_a_table_with_another_key_schema_is_refused(moto_server: MotoServer, table_name: str) -> None:
    moto_server.client().create_table(
        TableName=table_name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with (
        open_table(moto_server.uri(table_name), "cluster-a", **moto_server.options) as handle,
        pytest.raises(InvalidTableUriError, match="another key schema"),
    ):
        handle.initialize()


@pytest.mark.slow
def test_items_are_readable_by_an_admin(moto_server: MotoServer, table: DynamoDbMembershipTable) -> None:
    voter = make_entry(22222).silo_address
    entry = make_entry(
        status=SiloStatus.ACTIVE,
        proxy_port=30000,
        suspect_times=((voter, T0),),
        properties={"endpoint": "grpc://10.0.0.1:11111"},
    )
    assert table.insert_row(entry, table.read_all().version.next())
    items = _items(moto_server, table.settings.table_name)
    assert set(items) == {"10.0.0.1:11111@1", VERSION_KEY}
    version = items[VERSION_KEY]
    assert version["version"] == {"N": "1"}
    assert table.read_all().version == TableVersion(1, version["etag"]["N"])
    row = items["10.0.0.1:11111@1"]
    assert row["cluster_id"] == {"S": "cluster-a"}
    assert row["status"] == {"S": "ACTIVE"}
    assert row["proxy_port"] == {"N": "30000"}
    assert row["start_time"] == {"S": "2026-01-02T03:04:05.123456+00:00"}
    assert row["i_am_alive_time"] == {"S": "2026-01-02T03:04:05.123456+00:00"}
    assert row["suspect_times"] == {"L": [{"M": {"by": {"S": str(voter)}, "at": {"S": T0.isoformat()}}}]}
    assert row["properties"] == {"M": {"endpoint": {"S": "grpc://10.0.0.1:11111"}}}
    assert parse_etag(row["etag"]["N"]) is not None
    assert "address" not in row  # the silo key is the address


@pytest.mark.slow
def test_heartbeat_changes_only_the_i_am_alive_attribute(
    moto_server: MotoServer, table: DynamoDbMembershipTable
) -> None:
    entry = make_entry()
    assert table.insert_row(entry, table.read_all().version.next())
    before = _items(moto_server, table.settings.table_name)
    table.update_i_am_alive(entry.silo_address, T0 + timedelta(seconds=30))
    after = _items(moto_server, table.settings.table_name)
    assert after[VERSION_KEY] == before[VERSION_KEY]
    changed = {
        name for name, value in after[str(entry.silo_address)].items() if before[str(entry.silo_address)][name] != value
    }
    assert changed == {"i_am_alive_time"}
    assert after[str(entry.silo_address)]["i_am_alive_time"] == {"S": "2026-01-02T03:04:35.123456+00:00"}


@pytest.mark.slow
@pytest.mark.parametrize("etag", ["", "not-a-number", "3f2a9c1e5b7d4e0f8a6c2b1d9e7f5a3c", "0"])
def test_tokens_we_never_issued_lose(table: DynamoDbMembershipTable, etag: str) -> None:
    entry = make_entry()
    assert table.insert_row(entry, table.read_all().version.next())
    before = table.read_all()
    assert not table.insert_row(make_entry(1002), TableVersion(before.version.version + 1, etag))
    assert not table.update_row(entry.replace(silo_name="x"), etag, before.version.next())
    assert table.read_all() == before


@pytest.mark.slow
def test_clusters_share_one_table_without_touching_each_other(
    moto_server: MotoServer, table: DynamoDbMembershipTable
) -> None:
    with open_table(moto_server.uri(table.settings.table_name), "cluster-b", **moto_server.options) as other:
        other.initialize()
        assert other.insert_row(make_entry(), other.read_all().version.next())
        table.delete_cluster_entries()
        assert set(_items(moto_server, table.settings.table_name, "cluster-b")) == {"10.0.0.1:11111@1", VERSION_KEY}
        assert _items(moto_server, table.settings.table_name) == {}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"status": {"S": "ZOMBIE"}}, "unknown status 'ZOMBIE'"),
        ({"etag": {"S": "abc"}}, "no numeric 'etag'"),
        ({"etag": {"BOOL": True}}, "no numeric 'etag'"),
        ({"proxy_port": {"N": "1.5"}}, "proxy_port must be a non-negative int"),
        ({"start_time": {"S": "yesterday"}}, "start_time is not an ISO-8601 time"),
    ],
)
def test_a_malformed_item_is_named(
    moto_server: MotoServer, table: DynamoDbMembershipTable, attributes: dict[str, Any], message: str
) -> None:
    entry = make_entry()
    assert table.insert_row(entry, table.read_all().version.next())
    key = str(entry.silo_address)
    item = {**_items(moto_server, table.settings.table_name)[key], **attributes}
    moto_server.client().put_item(TableName=table.settings.table_name, Item=item)
    for read in (table.read_all, lambda: table.read_row(entry.silo_address)):
        data = read()
        assert data.rows == ()
        (malformed,) = data.malformed
        assert f"silo={key!r}" in malformed.key
        assert "cluster_id='cluster-a'" in malformed.key
        assert message in malformed.reason


@pytest.mark.slow
def test_a_malformed_version_item_is_named(moto_server: MotoServer, table: DynamoDbMembershipTable) -> None:
    moto_server.client().put_item(
        TableName=table.settings.table_name,
        Item={"cluster_id": {"S": "cluster-a"}, "silo": {"S": VERSION_KEY}, "version": {"S": "one"}},
    )
    with pytest.raises(MalformedRowError, match=r"version item \(cluster_id='cluster-a', silo='~version'\)"):
        table.read_all()


@pytest.mark.slow
def test_unreachable_server_raises_table_unavailable() -> None:
    uri = f"dynamodb://membership?region={REGION}&endpoint_url=http://127.0.0.1:{free_port()}"
    with open_table(uri, "cluster-a", retry_time=0.3, **CREDENTIALS) as handle:
        with pytest.raises(TableUnavailableError) as raised:
            handle.read_all()
        assert isinstance(raised.value.__cause__, EndpointConnectionError)
        with pytest.raises(TableUnavailableError):
            handle.insert_row(make_entry(), TableVersion(1, "17"))


@pytest.mark.slow
def test_server_restart_loses_data_and_initialize_recovers(
    moto_server: MotoServer, table: DynamoDbMembershipTable
) -> None:
    assert table.insert_row(make_entry(), table.read_all().version.next())
    moto_server.stop()
    try:
        with pytest.raises(TableUnavailableError):
            table.update_i_am_alive(make_entry().silo_address, T0)
    finally:
        moto_server.start()
    table.initialize()
    data = table.read_all()
    assert data.rows == ()
    assert data.version.version == 0
