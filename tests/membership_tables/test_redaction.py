"""``redact``: every path out of a process (logs, ``silo status``, errors, reprs) masks secrets."""

from __future__ import annotations

import pytest

from membership_tables import InvalidTableUriError, MembershipTableError, TableUnavailableError, open_table
from membership_tables.redaction import MASK, redact, remember_secret


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql+psycopg://u:pw@h:1/db", "postgresql+psycopg://u:***@h:1/db"),
        ("at mysql+pymysql://silo:p%40ss:w0rd@10.0.0.1/m: down", "at mysql+pymysql://silo:***@10.0.0.1/m: down"),
        ("zookeeper://silo:zk-pw@zk1:2181,zk2:2181/chroot", "zookeeper://silo:***@zk1:2181,zk2:2181/chroot"),
        ("'a://x:1@h' and 'b://y:2@k'", "'a://x:***@h' and 'b://y:***@k'"),
        ("GET /v1/kv/a?token=abc&recurse", "GET /v1/kv/a?token=***&recurse"),
        ("options aws_secret_access_key=AbC/123 region=x", "options aws_secret_access_key=*** region=x"),
        ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
        ("consul://127.0.0.1:8500/silo-membership", "consul://127.0.0.1:8500/silo-membership"),
        ("zookeeper://user@zk:2181/x", "zookeeper://user@zk:2181/x"),
        ("silo 127.0.0.1:4000@17 listening", "silo 127.0.0.1:4000@17 listening"),
        ("vote by 10.0.0.1:11111@5 at 12:00", "vote by 10.0.0.1:11111@5 at 12:00"),
    ],
)
def test_passwords_and_token_parameters_are_masked_by_shape(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_registered_secrets_are_masked_wherever_they_appear_longest_first() -> None:
    remember_secret("tok-7c2e91")
    remember_secret("tok-7c2e91-longer")
    remember_secret("")
    remember_secret(None)
    assert redact("a tok-7c2e91-longer b tok-7c2e91 c") == f"a {MASK} b {MASK} c"
    assert redact("token=tok-7c2e91;x 'tok-7c2e91'") == f"token={MASK};x '{MASK}'"


def test_a_secret_inside_a_longer_word_leaves_the_word_alone() -> None:
    remember_secret("secret")
    remember_secret("p@ss-5e1d!")  # unlike any other test's secret: the registry is process-wide
    assert redact("aws_secret_access_key secrets secret") == f"aws_secret_access_key secrets {MASK}"
    assert redact("password p@ss-5e1d! or p@ss-5e1d!x") == f"password {MASK} or p@ss-5e1d!x"


def test_every_error_of_the_package_is_redacted_on_the_way_in() -> None:
    remember_secret("err-secret-3b8f")
    error = TableUnavailableError("agent at h said err-secret-3b8f is wrong (see postgresql://u:pw-1@h/d)")
    assert "err-secret-3b8f" not in str(error)
    assert "pw-1" not in str(error)
    assert isinstance(MembershipTableError("x", 3).args[1], int)  # non-text arguments pass unchanged


@pytest.mark.parametrize(
    "uri",
    [
        "postgresql+foo://u:bad-uri-pw@h/db",
        "mysql+pymysql://u:bad-uri-pw@localhost",
        "zookeeper://u:bad-uri-pw@zk:2181/x?retries=3",
        "redis://u:bad-uri-pw@h/0",
    ],
)
def test_uri_errors_never_quote_the_password(uri: str) -> None:
    with pytest.raises(InvalidTableUriError) as info:
        open_table(uri, "c1")
    assert "bad-uri-pw" not in str(info.value)


@pytest.mark.parametrize(
    ("uri", "options", "secret"),
    [
        ("postgresql+psycopg://silo:repr-pw-1@127.0.0.1:1/db", {}, "repr-pw-1"),
        ("mysql+pymysql://silo:repr-pw-2@127.0.0.1:1/db", {}, "repr-pw-2"),
        ("zookeeper://silo:repr-pw-3@127.0.0.1:1/x", {}, "repr-pw-3"),
        ("consul://127.0.0.1:1/x", {"token": "repr-token-4"}, "repr-token-4"),
        (
            "dynamodb://membership?region=eu-west-1&endpoint_url=http://127.0.0.1:1",
            {"aws_access_key_id": "AKIDREPR", "aws_secret_access_key": "repr-secret-5"},
            "repr-secret-5",
        ),
    ],
)
def test_no_table_repr_shows_its_secret(uri: str, options: dict[str, str], secret: str) -> None:
    with open_table(uri, "c1", **options) as table:  # none of these connects before first use
        assert secret not in repr(table)
        assert secret not in repr(vars(table).get("settings"))
