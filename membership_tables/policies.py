"""The least privilege a silo needs in Consul and DynamoDB, as the stores' own policy documents.

Generated here (no driver needed) so docs/security.md, docs/consul.md and docs/dynamodb.md
cannot drift from what the backends do (a test compares them). The SQL GRANTs live next to
the schema (``membership_tables.sql.grants``); ZooKeeper's digest ACLs are set by the
backend itself on every znode it creates.
"""

from __future__ import annotations

import json

DYNAMODB_SILO_ACTIONS = (
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
)
"""What a silo calls: ``DescribeTable`` (``initialize`` checks the table exists), the reads, and
the item writes. ``TransactWriteItems``/``TransactGetItems`` are authorized as the ``PutItem``
and ``GetItem`` they contain; ``CreateTable`` is left to ``silo table init``."""


def consul_policy(prefix: str) -> str:
    """An ACL policy (HCL) that may read and write the keys under ``prefix`` and nothing else."""
    return f'key_prefix "{prefix.strip("/")}/" {{\n  policy = "write"\n}}\n'


def dynamodb_policy(table: str, region: str = "*", account: str = "*") -> str:
    """An IAM policy (JSON) allowing a silo's item actions on ``table`` alone."""
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "SiloMembershipItems",
                "Effect": "Allow",
                "Action": list(DYNAMODB_SILO_ACTIONS),
                "Resource": f"arn:aws:dynamodb:{region}:{account}:table/{table}",
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"
