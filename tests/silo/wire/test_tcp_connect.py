"""``connect_outcome``: a bare connect's verdict on 127.0.0.1, also when our event loop runs late."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

from silo.membership.clock import SystemClock, with_timeout
from silo.membership.probing import ProbeOutcome
from silo.wire.tcp_connect import connect_outcome
from tests.silo.wire.test_prober import closed_port, silent_listener

Connect = Callable[[str, int, float], Awaitable[ProbeOutcome]]


def test_a_listening_port_is_answered_and_a_closed_one_refused() -> None:
    async def scenario() -> tuple[ProbeOutcome, ProbeOutcome, ProbeOutcome]:
        with silent_listener() as listening:
            accepted = await connect_outcome(listening.host, listening.port, 1.0)
            by_name = await connect_outcome("localhost", listening.port, 1.0)
        closed = closed_port()
        return accepted, by_name, await connect_outcome(closed.host, closed.port, 1.0)

    assert asyncio.run(scenario()) == (ProbeOutcome.ANSWERED, ProbeOutcome.ANSWERED, ProbeOutcome.REFUSED)


async def old_style_connect(host: str, port: int, timeout: float) -> ProbeOutcome:
    """How the connect was made before: through ``asyncio.open_connection`` under ``wait_for``."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except ConnectionRefusedError:
        return ProbeOutcome.REFUSED
    except (OSError, TimeoutError):
        return ProbeOutcome.TIMED_OUT
    writer.close()
    return ProbeOutcome.ANSWERED


def verdict_after_a_stall(connect: Connect, listening: bool) -> ProbeOutcome:
    """The outcome of a connect (with its caller's timeout around it, as a monitor makes it) when
    our event loop stalls past both deadlines just after the connect went out."""
    timeout = 0.2

    async def scenario() -> ProbeOutcome:
        with silent_listener() as open_port:
            target = open_port if listening else closed_port()
            attempt = asyncio.ensure_future(
                with_timeout(SystemClock(), connect(target.host, target.port, timeout), timeout)
            )
            await asyncio.sleep(0)  # the connect goes out
            time.sleep(3 * timeout)  # and the loop runs late: an overloaded host
            try:
                return await attempt
            except TimeoutError:
                return ProbeOutcome.TIMED_OUT

    return asyncio.run(scenario())


@pytest.mark.parametrize("listening", [False, True], ids=["closed port", "listening port"])
def test_the_kernels_verdict_wins_over_deadlines_that_came_due_while_the_loop_was_late(listening: bool) -> None:
    expected = ProbeOutcome.ANSWERED if listening else ProbeOutcome.REFUSED
    assert verdict_after_a_stall(connect_outcome, listening) is expected


@pytest.mark.parametrize("listening", [False, True], ids=["closed port", "listening port"])
def test_control_a_connect_awaited_through_tasks_lost_that_race(listening: bool) -> None:
    assert verdict_after_a_stall(old_style_connect, listening) is ProbeOutcome.TIMED_OUT


def test_a_connect_still_on_its_way_at_the_deadline_times_out() -> None:
    """A listener whose backlog is full drops further handshakes (Linux): no answer, no refusal."""

    async def scenario() -> ProbeOutcome:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(0)
            port = listener.getsockname()[1]
            queued = []
            try:
                for _ in range(8):  # fill the accept queue
                    client = socket.socket()
                    client.setblocking(False)
                    client.connect_ex(("127.0.0.1", port))
                    queued.append(client)
                await asyncio.sleep(0.05)
                return await connect_outcome("127.0.0.1", port, 0.3)
            finally:
                for client in queued:
                    client.close()

    assert asyncio.run(scenario()) is ProbeOutcome.TIMED_OUT
