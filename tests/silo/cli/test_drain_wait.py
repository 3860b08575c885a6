"""``silo drain --wait``: how long it asks whether the silo is still there (an injected clock)."""

from __future__ import annotations

from collections.abc import Callable

from silo.cli.commands import build_parser
from silo.cli.drain import POLL_SECONDS, wait_until_gone


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.asked: list[tuple[float, float]] = []

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def answers_until(self, gone_at: float) -> Callable[[float], bool]:
        def answers(timeout: float) -> bool:
            self.asked.append((self.now, timeout))
            return self.now < gone_at

        return answers


def test_it_returns_once_the_silo_stops_answering() -> None:
    clock = Clock()
    assert wait_until_gone(clock.answers_until(101.0), 30.0, lambda: clock.now, clock.sleep)
    assert 101.0 <= clock.now < 101.0 + 2 * POLL_SECONDS
    assert all(timeout <= 2.0 for _, timeout in clock.asked)


def test_it_gives_up_at_the_limit_without_asking_past_it() -> None:
    clock = Clock()
    assert not wait_until_gone(clock.answers_until(1e9), 3.0, lambda: clock.now, clock.sleep)
    assert clock.now <= 103.0 + 1e-9
    assert all(at + timeout <= 103.0 + 1e-9 for at, timeout in clock.asked)


def test_wait_is_a_duration_and_off_by_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["drain", "h:1", "--cluster", "c"]).wait == 0.0
    assert parser.parse_args(["drain", "h:1", "--cluster", "c", "--wait", "45s"]).wait == 45.0
