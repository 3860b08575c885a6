"""In-process silos with the real gRPC server (``silo.runtime.process.assemble``) on a real clock.

For tests that need real gRPC between silos and clients but not separate processes: each
silo uses the ``local`` preset, serves a gateway port (advertised as its ``proxy_port``) and
is stopped gracefully by ``LiveCluster.close()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TypeVar

from membership_tables import open_table
from silo.client.topology import ViewUpdate
from silo.membership.options import SiloOptions
from silo.runtime.process import SiloProcessConfig, SiloStack, assemble
from testbed.services.process import free_port

CLUSTER = "live-cluster"
WAIT = 60.0
"""Seconds a scenario may wait for an expected update: a correctness bound on a loaded machine."""

T = TypeVar("T")


class LiveCluster:
    """Silos of one cluster on one table URI, started in the current event loop."""

    def __init__(self, table_uri: str, cluster_id: str = CLUSTER) -> None:
        self.table_uri = table_uri
        self.cluster_id = cluster_id
        self.stacks: list[SiloStack] = []

    async def start(self, properties: Mapping[str, str] | None = None) -> SiloStack:
        """One more silo, Active when this returns; its gateway is ``gateway(stack)``."""
        config = SiloProcessConfig(
            cluster_id=self.cluster_id,
            options=SiloOptions.local(),
            name=f"live-{len(self.stacks)}",
            properties=dict(properties or {}),
            gateway_port=free_port(),
        )
        stack = assemble(open_table(self.table_uri, self.cluster_id), config)
        self.stacks.append(stack)
        await stack.start()
        return stack

    async def stop(self, stack: SiloStack) -> None:
        """Leave gracefully (ShuttingDown, Dead), then stop serving."""
        self.stacks.remove(stack)
        await stack.silo.stop()
        await stack.close()

    async def close(self) -> None:
        for stack in list(self.stacks):
            await self.stop(stack)


def gateway(stack: SiloStack) -> str:
    return f"127.0.0.1:{stack.gateway_port}"


async def collect(
    updates: AsyncIterator[ViewUpdate], until: Callable[[list[ViewUpdate]], bool], timeout: float = WAIT
) -> list[ViewUpdate]:
    """Updates from ``updates`` until ``until(all so far)`` holds; fails after ``timeout`` seconds."""
    seen: list[ViewUpdate] = []
    async with asyncio.timeout(timeout):
        async for update in updates:
            seen.append(update)
            if until(seen):
                return seen
    raise AssertionError(f"the watch ended before the expected update; got versions {[u.view.version for u in seen]}")
