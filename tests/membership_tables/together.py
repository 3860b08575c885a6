"""Running actions in threads released at one moment, as many silos would act at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def run_together(actions: Sequence[Callable[[], object]]) -> list[BaseException]:
    """Run each of ``actions`` in a thread of its own, all released by one barrier, and wait for
    them; returns what they raised (a failed assert in a thread would otherwise go unseen)."""
    barrier = threading.Barrier(len(actions))
    errors: list[BaseException] = []

    def run(action: Callable[[], object]) -> None:
        barrier.wait()
        try:
            action()
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
