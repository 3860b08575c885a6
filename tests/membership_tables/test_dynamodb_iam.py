"""DynamoDB under IAM: the documented policy's actions are all a silo needs, and CreateTable is not one.

A private moto server enforces IAM once the set-up is done (``/moto-api/reset-auth`` with 0,
what ``INITIAL_NO_AUTH_ACTION_COUNT=0`` does at start). What moto checks and what it does not:
moto authorizes each request by its API name (``dynamodb:TransactWriteItems``, where AWS
authorizes the ``PutItem`` inside it) and against the resource ``*`` for DynamoDB (it never
matches a table ARN). So the policy attached here is the documented one's ``Action`` list plus
the two transaction API names, on ``Resource: "*"``: this proves the actions suffice and that
everything else (``CreateTable``, ``DeleteTable``) is refused, not the table-ARN scoping.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from membership_tables import AccessDeniedError, open_table
from membership_tables.dynamodb import DynamoDbMembershipTable, is_denied
from membership_tables.policies import dynamodb_policy
from membership_tables.testing import make_entry
from membership_tables.testing.checks import T0
from testbed.services.dynamodb import CREDENTIALS, REGION, MotoServer

pytestmark = pytest.mark.slow

MOTO_API_NAMES = ("dynamodb:TransactWriteItems", "dynamodb:TransactGetItems")


def moto_enforceable(policy: str) -> str:
    """The documented policy as moto can enforce it (see the module docstring)."""
    document = json.loads(policy)
    (statement,) = document["Statement"]
    statement["Action"] = [*statement["Action"], *MOTO_API_NAMES]
    statement["Resource"] = "*"
    return json.dumps(document)


@pytest.fixture
def iam_moto(tmp_path: Path) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def silo_credentials(server: MotoServer, table: str) -> dict[str, str]:
    """An IAM user holding the silo policy of ``table``; its access key as table options."""
    iam = boto3.client("iam", region_name=REGION, endpoint_url=server.endpoint_url, **CREDENTIALS)
    iam.create_user(UserName="silo")
    arn = iam.create_policy(PolicyName="silo-membership", PolicyDocument=moto_enforceable(dynamodb_policy(table)))[
        "Policy"
    ]["Arn"]
    iam.attach_user_policy(UserName="silo", PolicyArn=arn)
    key = iam.create_access_key(UserName="silo")["AccessKey"]
    return {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}


def enforce_iam(server: MotoServer) -> None:
    answer = requests.post(f"{server.endpoint_url}/moto-api/reset-auth", data=b"0", timeout=10)
    assert answer.status_code == 200, answer.text


def test_the_documented_policy_lets_a_silo_work_and_nothing_more(iam_moto: MotoServer) -> None:
    table_name = f"iam-{uuid.uuid4().hex[:8]}"
    with open_table(iam_moto.uri(table_name), "admin", **iam_moto.options) as admin:
        admin.initialize(try_init_version=False)  # what `silo table init URI` does
    credentials = silo_credentials(iam_moto, table_name)
    enforce_iam(iam_moto)

    with pytest.raises(AccessDeniedError, match="refused"):  # the admin's dummy keys are no IAM user
        open_table(iam_moto.uri(table_name), "c1", **iam_moto.options).read_all()

    entry = make_entry()
    with open_table(iam_moto.uri(table_name), "c1", **credentials) as table:
        table.initialize()  # DescribeTable finds the table; only the version item is written
        assert table.insert_row(entry, table.read_all().version.next())
        read = table.read_row(entry.silo_address)
        assert table.update_row(entry.replace(status=entry.status.DEAD), read.rows[0][1], read.version.next())
        table.update_i_am_alive(entry.silo_address, entry.i_am_alive_time + timedelta(seconds=1))
        assert table.cleanup_defunct_entries(T0 + timedelta(days=1)) == 1
        table.delete_cluster_entries()
        assert table.read_all().rows == ()

        with (
            open_table(iam_moto.uri(f"{table_name}-new"), "c1", **credentials) as missing,
            pytest.raises(AccessDeniedError, match="silo table init URI") as info,
        ):
            missing.initialize()
        assert credentials["aws_secret_access_key"] not in str(info.value)
        assert credentials["aws_secret_access_key"] not in repr(table)
        assert isinstance(table, DynamoDbMembershipTable)
        assert credentials["aws_secret_access_key"] not in repr(table.settings)

    raw = boto3.client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=iam_moto.endpoint_url,
        aws_access_key_id=credentials["aws_access_key_id"],
        aws_secret_access_key=credentials["aws_secret_access_key"],
    )
    for forbidden in (lambda: raw.delete_table(TableName=table_name), lambda: raw.list_tables()):
        with pytest.raises(ClientError) as denied:
            forbidden()
        assert is_denied(denied.value)
        assert "not authorized" in str(denied.value)
