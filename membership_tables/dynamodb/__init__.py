"""DynamoDB membership table: ``dynamodb://TABLE?region=REGION&endpoint_url=URL``.

One DynamoDB table holds any number of clusters. Hash key ``cluster_id`` (S), range key
``silo`` (S): a silo's ``host:port@generation``, or ``~version`` for the cluster's version
item (a silo key always holds ``:`` and ``@``, so the two can never collide).

* version item: ``version`` (N) and ``etag`` (N).
* row item: the fields of ``codec.entry_to_document`` as plain attributes (the address is
  the ``silo`` key), a numeric ``etag``, and ``i_am_alive_time`` as an ISO-8601 UTC string,
  which sorts like the time it names and so can be compared in condition expressions.

Every canonical write is one ``TransactWriteItems`` of the version item and the row (every
row, for ``update_rows``), each with a condition on its etag; heartbeats are a conditional ``UpdateItem`` of
``i_am_alive_time`` alone. Reads are strongly consistent and fenced by the version item.
Etags are random 63-bit numbers (see ``new_numeric_etag``). Throttling, 5xx, network
errors and transaction conflicts are retried by one tenacity policy (botocore's own
retries are off) and then raise ``TableUnavailableError``. See ``docs/dynamodb.md``.

The package: ``_settings`` parses the URI, ``_items`` turns rows into items and back,
``_connection`` holds the client and the retry policy, ``_schema`` creates and checks the table,
``_table`` is the contract.
"""

from membership_tables.dynamodb._connection import cancellation_reasons, error_code, is_denied, is_transient
from membership_tables.dynamodb._items import (
    ETAG,
    HASH_KEY,
    I_AM_ALIVE,
    RANGE_KEY,
    VERSION_KEY,
    Item,
    new_numeric_etag,
    parse_etag,
)
from membership_tables.dynamodb._settings import DynamoDbSettings, parse_uri
from membership_tables.dynamodb._table import MAX_TRANSACT_ITEMS, DynamoDbMembershipTable

__all__ = [
    "ETAG",
    "HASH_KEY",
    "I_AM_ALIVE",
    "MAX_TRANSACT_ITEMS",
    "RANGE_KEY",
    "VERSION_KEY",
    "DynamoDbMembershipTable",
    "DynamoDbSettings",
    "Item",
    "cancellation_reasons",
    "error_code",
    "is_denied",
    "is_transient",
    "new_numeric_etag",
    "parse_etag",
    "parse_uri",
]
