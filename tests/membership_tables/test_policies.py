"""The documented GRANTs and policies are exactly what the code generates, so they cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from membership_tables.policies import DYNAMODB_SILO_ACTIONS, consul_policy, dynamodb_policy
from membership_tables.sql.grants import grant_statements

DOCS = Path(__file__).resolve().parents[2] / "docs"
POSTGRES_GRANTS = "\n".join(grant_statements("postgresql", "membership", "silo_app"))
MYSQL_GRANTS = "\n".join(grant_statements("mysql", "membership", "silo_app"))
CONSUL_POLICY = consul_policy("silo-membership")
DYNAMODB_POLICY = dynamodb_policy("TABLE", "REGION", "ACCOUNT")


@pytest.mark.parametrize(
    ("page", "generated"),
    [
        ("security.md", POSTGRES_GRANTS),
        ("security.md", MYSQL_GRANTS),
        ("security.md", CONSUL_POLICY),
        ("security.md", DYNAMODB_POLICY),
        ("sql.md", POSTGRES_GRANTS),
        ("sql.md", MYSQL_GRANTS),
        ("consul.md", CONSUL_POLICY),
        ("dynamodb.md", DYNAMODB_POLICY),
    ],
)
def test_the_docs_show_exactly_the_generated_text(page: str, generated: str) -> None:
    assert f"\n{generated.rstrip()}\n```" in (DOCS / page).read_text(), f"docs/{page} drifted from the code"


def test_security_md_has_the_least_privilege_section() -> None:
    assert "\n## Least-privilege stores\n" in "\n" + (DOCS / "security.md").read_text()


def test_the_consul_policy_covers_the_prefix_as_a_directory() -> None:
    assert consul_policy("/team/silo-membership/") == 'key_prefix "team/silo-membership/" {\n  policy = "write"\n}\n'


def test_the_dynamodb_policy_names_only_item_actions_and_one_table() -> None:
    (statement,) = json.loads(dynamodb_policy("membership", "eu-west-1", "123456789012"))["Statement"]
    assert statement["Resource"] == "arn:aws:dynamodb:eu-west-1:123456789012:table/membership"
    assert statement["Action"] == list(DYNAMODB_SILO_ACTIONS)
    assert "dynamodb:CreateTable" not in statement["Action"]
    assert "dynamodb:DeleteTable" not in statement["Action"]
