"""Fire-and-forget tasks a role starts and must cancel when it stops, and futures nobody may await."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def retrieve_failure(future: asyncio.Future[Any]) -> None:
    """Mark a future's failure as seen (a lease read, a vote's outcome) when nobody may await it any
    more: asyncio would log "Future exception was never retrieved" at ERROR. A done callback."""
    if not future.cancelled():
        future.exception()


class BackgroundTasks:
    """Tasks started and forgotten (each drops out once done), all cancelled together at stop.

    Holding a reference also keeps a task from being garbage-collected while it runs.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def finished(self) -> None:
        """Until every task has ended, the ones they start meanwhile included."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every running task now, without waiting: the tasks, for the caller to await.

        A stop that awaits before it cancels can itself be cancelled in between (its caller
        stopping too) and leave the tasks running for ever.
        """
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks

    async def cancel_all(self) -> None:
        """Cancel every running task and wait until they have all ended."""
        await asyncio.gather(*self.cancel(), return_exceptions=True)
