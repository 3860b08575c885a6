"""The serving half of keyed work: the ``silo.v1.Work`` service a silo's gRPC server runs.

``Work.Process`` runs a handler from the ``HandlerRegistry`` in a thread pool (never on the
event loop), only while the silo may serve work (Active, not fenced, not draining), on items or
on a columnar (Arrow) batch (``silo.work.execution``), after checking that the batch's keys are
the silo's to serve now (``OwnershipCheck``) and that the silo's view is as new as the caller's.
A handler that outlives the silo's membership lease has its results withheld (UNAVAILABLE). A
silo that cannot read columnar batches (no pyarrow) logs a WARNING naming the extra when it
starts, not at the first batch.

The server (``silo.wire.server.MembershipServer``) serves it through its ``ServedPart`` seam and
admits each call (cluster, caller's certificate) before the service looks at it; the calling half
is ``silo.work.client``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol

import grpc

from membership_tables import MembershipTableData, SiloAddress
from silo.wire import codec
from silo.wire.proto.silo.v1 import membership_pb2 as pb
from silo.wire.rpc import abort, clip, unary
from silo.work import columns, execution
from silo.work.hashring import KEY_HASH
from silo.work.ownership import NotOwnedError, OwnershipCheck
from silo.work.registry import HandlerRegistry

__all__ = ["AdmitWork", "WorkHost", "WorkService"]

log = logging.getLogger(__name__)


class WorkHost(Protocol):
    """What the Work service needs from the local silo."""

    @property
    def silo_address(self) -> SiloAddress: ...

    def membership_snapshot(self) -> MembershipTableData:
        """The latest table snapshot this silo holds."""
        ...

    def work_refusal(self) -> str | None:
        """Why this silo must not serve work now (not Active, fenced, draining); None if it may."""
        ...

    def ownership(self) -> OwnershipCheck:
        """The keys this silo may serve now and its fencing token (``silo.runtime.ownership``)."""
        ...

    def results_guard(self) -> Callable[[], str | None]:
        """For work starting now: a check, run when the handler returns, of why its results must be
        withheld (the lease ran out meanwhile); None if they may be returned."""
        ...

    async def catch_up(self, version: int) -> bool:
        """Bring this silo's view to ``version`` if it can (briefly); True if it is that new."""
        ...


AdmitWork = Callable[[str, Callable[[], str], Any, str], Awaitable[WorkHost]]
"""``admit(cluster_id, describe_sender, context, method)``: the silo if the call is for its cluster
and the caller may make it; otherwise the call is aborted (``MembershipServer.admit_cluster``)."""


class WorkService:
    """The ``silo.v1.Work`` service: runs the registered handlers on admitted batches."""

    def __init__(
        self, admit: AdmitWork, handlers: HandlerRegistry | None = None, *, work_threads: int | None = None
    ) -> None:
        """``admit``: the server's admission of a call (``MembershipServer.admit_cluster``), answering
        the silo it serves; ``handlers``: the Work handlers (default: the built-ins); ``work_threads``:
        the size of the pool they run in (default: Python's ``ThreadPoolExecutor`` default)."""
        self._admit = admit
        self.handlers = handlers if handlers is not None else HandlerRegistry()
        """The Work handlers served; ``service.handlers.register(name, function)`` adds one."""
        self._work_pool = ThreadPoolExecutor(max_workers=work_threads, thread_name_prefix="silo-work")
        self._work_in_flight = 0
        self._work_idle = asyncio.Event()
        self._work_idle.set()

    def rpc_handler(self) -> grpc.GenericRpcHandler:
        handlers = {codec.PROCESS.name: unary(codec.PROCESS, self._process)}
        return grpc.method_handlers_generic_handler(codec.WORK_SERVICE_NAME, handlers)

    def starting(self, silo_address: SiloAddress) -> None:
        unavailable = columns.columnar_unavailable()
        if unavailable is not None:
            log.warning(
                "silo %s will refuse columnar Work batches (the Spark path) with INVALID_ARGUMENT: %s",
                silo_address,
                unavailable,
            )

    def close(self) -> None:
        self._work_pool.shutdown(wait=False, cancel_futures=True)

    @property
    def work_in_flight(self) -> int:
        """``Work.Process`` calls admitted and not answered yet."""
        return self._work_in_flight

    async def work_finished(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until no ``Work.Process`` call is in flight (a draining
        silo refuses new ones); True if none is."""
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await self._work_idle.wait()
        except TimeoutError:
            return False
        return True

    async def _process(self, request: pb.ProcessRequest, context: Any) -> pb.ProcessResponse:
        sender = clip(request.sender) or "an unnamed client"
        silo = await self._admit(clip(request.cluster_id), lambda: sender, context, "Process")
        refusal = silo.work_refusal()
        if refusal is not None:
            await abort(context, grpc.StatusCode.UNAVAILABLE, refusal)
        # in flight from here on: a drain that starts now waits for this call (``work_finished``)
        self._work_in_flight += 1
        self._work_idle.clear()
        try:
            return await self._run_work(silo, request, sender, context)
        finally:
            self._work_in_flight -= 1
            if self._work_in_flight == 0:
                self._work_idle.set()

    async def _run_work(
        self, silo: WorkHost, request: pb.ProcessRequest, sender: str, context: Any
    ) -> pb.ProcessResponse:
        """Run an admitted ``Work.Process`` call's handler in the work pool and answer with its results."""
        withheld = silo.results_guard()
        work = self.handlers.get(request.handler)
        if work is None:
            await abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"no handler {clip(request.handler)!r} on silo {silo.silo_address} "
                f"(it has: {', '.join(self.handlers.names)}); start the silo with --handler NAME=module:function",
            )
        if request.key_hash and request.key_hash != KEY_HASH:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the caller placed keys on the ring with {clip(request.key_hash)!r}, silo {silo.silo_address} with "
                f"{KEY_HASH!r}: they would disagree on most keys' owners; run the same silo-membership version "
                "on callers and silos",
            )
        if request.view_version > silo.membership_snapshot().version.version and not await silo.catch_up(
            request.view_version
        ):
            await abort(
                context,
                grpc.StatusCode.ABORTED,
                f"silo {silo.silo_address} has not caught up with view version {request.view_version} yet; retry",
            )
        items = [(item.key, item.payload) for item in request.items]
        count = len(items) or "a columnar batch of"
        ownership = silo.ownership()
        run = partial(
            execution.execute,
            work,
            items=items,
            arrow_batch=request.arrow_batch,
            admit=ownership.admit,
            token=ownership.token,
        )
        try:
            outcome = await asyncio.get_running_loop().run_in_executor(self._work_pool, run)
        except NotOwnedError as exc:
            await abort(context, grpc.StatusCode.ABORTED, str(exc) + _unstated_key_hash(request))
        except execution.BadRequestError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"handler {request.handler!r}: {exc}")
        except execution.HandlerFailedError as exc:
            log.error("handler %r failed on %s items from %s", request.handler, count, sender, exc_info=exc.__cause__)
            await abort(context, grpc.StatusCode.INTERNAL, f"handler {request.handler!r} raised {exc}")
        except execution.BadResultsError as exc:
            log.error("handler %r: %s", request.handler, exc)
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"handler {request.handler!r} {exc}")
        reason = withheld()
        if reason is not None:
            # the handler outlived the lease (a long call, a pause): its side effects may overlap
            # the next owner's, but its results must not reach the caller, who retries elsewhere
            log.warning("handler %r on %s items from %s: %s", request.handler, count, sender, reason)
            await abort(context, grpc.StatusCode.UNAVAILABLE, reason)
        return pb.ProcessResponse(
            silo=str(silo.silo_address),
            results=outcome.results,
            arrow_results=outcome.arrow_results,
            handler_seconds=outcome.handler_seconds,
            serialization_seconds=outcome.serialization_seconds,
            fencing_token=ownership.token,
        )


def _unstated_key_hash(request: pb.ProcessRequest) -> str:
    """A hint for a refused caller that did not say how it hashes keys (older clients used blake2b)."""
    if request.key_hash:
        return ""
    return (
        f" (this silo places keys with {KEY_HASH}; the request does not say how its caller placed them: "
        "silo-membership clients before key_hash hashed keys with blake2b and must be upgraded)"
    )
