"""Fencing tokens: the handler's token, and a sink that refuses a replaced owner's late writes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from silo.work import execution
from silo.work.fencing import NoTokenError, current_token, running_under
from silo.work.token_sink import TokenSink


def test_a_handler_runs_under_the_token_it_was_called_with() -> None:
    seen: list[int] = []

    def handler(items: list[tuple[str, bytes]]) -> list[bytes]:
        seen.append(current_token())
        return [b"" for _ in items]

    execution.execute(handler, items=[("k", b"v")], token=42)
    assert seen == [42]
    with pytest.raises(NoTokenError, match="only defined inside a Work handler"):
        current_token()


def test_tokens_do_not_leak_between_threads() -> None:
    seen: dict[str, int | None] = {}

    def other() -> None:
        try:
            seen["other"] = current_token()
        except NoTokenError:
            seen["other"] = None

    with running_under(7):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        seen["here"] = current_token()
    assert seen == {"other": None, "here": 7}


def test_a_refused_batch_never_reaches_the_handler() -> None:
    called: list[object] = []

    def refuse(keys: object) -> None:
        raise RuntimeError(f"not ours: {keys}")

    with pytest.raises(RuntimeError, match="not ours"):
        execution.execute(called.append, items=[("k", b"v")], admit=refuse)
    assert called == []


def test_the_sink_keeps_the_newest_owners_write_and_refuses_an_older_token(tmp_path: Path) -> None:
    sink = TokenSink(f"sqlite:///{tmp_path / 'sink.db'}")
    assert sink.write("user-1", 5, b"old owner")
    assert sink.write("user-1", 5, b"old owner, retried"), "the same owner may write again"
    assert sink.write("user-1", 9, b"new owner")
    assert not sink.write("user-1", 5, b"the old owner, resumed from a pause")
    assert sink.read("user-1") == (9, b"new owner")
    assert sink.read("user-2") is None
    assert TokenSink(sink.engine).read("user-1") == (9, b"new owner"), "a second sink on the same table agrees"
