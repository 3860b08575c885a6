"""One silo as an operating-system process: what ``silo run`` does after parsing arguments.

Order matters: the signal handlers come first (a SIGTERM during start-up, even while the
table is read, stops the process cleanly); the gRPC server binds next (``--port 0`` lets the
OS pick), because the silo's identity ``host:port@generation`` needs the port; then the
silo joins, and the health service turns SERVING (``/readyz`` 200, systemd ``READY=1``) once
it is Active. SIGTERM/SIGINT drain it (``drain_and_stop``): new Work is refused with
UNAVAILABLE, ShuttingDown is written so routers move its keys, the Work calls in flight
finish, Dead is written and the process exits 0, all within ``shutdown_grace``. If the silo
finds itself declared dead it stops serving at once and the process exits with
``ExitCode.DECLARED_DEAD``. Once the silo has stopped, the process exits within
``EXIT_GRACE`` even if a table call is still blocked in a worker thread (see
``_exit_past_blocked_threads``).

``assemble`` builds the same stack (server, prober, silo) for silos that run inside another
program, e.g. tests: ``await stack.start()`` ... ``await stack.silo.stop(); await stack.close()``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from membership_tables import MembershipTable, MembershipTableError, SiloAddress, SiloStatus
from membership_tables.history import JsonLinesSink, RecordingTable
from silo.errors import OptionsError, SiloError
from silo.exit_codes import ExitCode
from silo.membership.generation import next_generation
from silo.membership.observer import NULL_OBSERVER
from silo.membership.options import SiloOptions
from silo.membership.probing import Prober
from silo.runtime.claims import ClaimsFile
from silo.runtime.gc_tuning import freeze_startup_objects, tune_for_silos
from silo.runtime.health_http import HealthServer
from silo.runtime.metrics import MetricsExport, MetricsUnavailableError, on_loop
from silo.runtime.sd_notify import notify
from silo.runtime.silo import Silo
from silo.wire.admission import (
    TRANSPORT_PROPERTY,
    AdmissionRefusedError,
    advertised_properties,
    check_admission,
    transport_of,
)
from silo.wire.prober import GrpcProber
from silo.wire.server import BindError, MembershipServer
from silo.wire.tls import TlsSettings
from silo.work.registry import HandlerRegistry
from silo.work.service import WorkService

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class SiloProcessConfig:
    cluster_id: str
    host: str = "127.0.0.1"
    """The address the gRPC server binds (``--host``); also the one advertised unless ``advertise_host``."""
    port: int = 0
    """The port bound (``--port``; 0 = a free one)."""
    gateway_port: int | None = None
    """An extra client gateway port (``--gateway-port``; 0 = a free one); ``None`` = no gateway."""
    advertise_host: str | None = None
    """The host in the silo's identity and row, that peers and clients reach it at (``--advertise-host``),
    when it differs from the bound ``host`` (NAT, containers, a wildcard bind); ``None`` = ``host``."""
    advertise_port: int | None = None
    """The port advertised (``--advertise-port``), when something forwards it to the bound one; ``None`` =
    the bound port."""
    name: str | None = None
    """Silo name; ``None`` = ``silo-PORT``."""
    options: SiloOptions = field(default_factory=SiloOptions.production)
    properties: Mapping[str, str] = field(default_factory=dict)
    """Advertised in the silo's row (``--property``)."""
    handlers: HandlerRegistry = field(default_factory=HandlerRegistry)
    """The Work handlers served (``--handler``); the built-ins are always there."""
    history_file: str | None = None
    """Append every versioned write this silo makes to this JSON-lines file (``--history-file``):
    an audit trail that ``silo.membership.history_check.check_history`` can verify."""
    claims_file: str | None = None
    """Append what this silo may serve, at every change of it, to this JSON-lines file
    (``--claims-file``): ``silo.runtime.claims.check_claims`` proves one owner per key over a run."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on this port of ``host`` (``0`` = a free one, logged); ``None`` = no
    metrics at all (nothing is measured, ``prometheus_client`` is not even imported)."""
    table_uri: str | None = None
    """The table's URI, for the ``backend`` label of the table metrics (else the table's class)."""
    tls: TlsSettings | None = None
    """Serve and call over mutual TLS with these files (``--tls-cert/--tls-key/--tls-ca``);
    ``None`` = plaintext. A TLS silo's row says so (property ``transport=tls``)."""
    reflection: bool = True
    """Serve gRPC server reflection on the silo's ports (``--no-reflection`` turns it off)."""
    health_port: int | None = None
    """Serve ``/livez`` and ``/readyz`` over plain HTTP on this port of ``host`` (``0`` = a free one,
    logged; ``silo.runtime.health_http``); ``None`` = no health port."""
    shutdown_grace: float = 10.0
    """Seconds a signalled silo has to drain (``--shutdown-grace``): write ShuttingDown, let the Work
    calls in flight finish, write Dead; past it the process exits without what is left."""


EXIT_GRACE = 1.0
"""Seconds a stopped silo waits for its worker threads before the process exits without them."""


def run_process(table: MembershipTable, config: SiloProcessConfig) -> ExitCode:
    """Run the silo until it is signalled or declared dead; returns the exit code.

    It owns the process: it also tunes the garbage collector for a long-running silo
    (``gc_tuning``: collect less often, and freeze what exists once the silo is Active), and
    exits the process itself if threads still block once the silo has stopped."""
    tune_for_silos()
    code = asyncio.run(_serve(table, config))
    _exit_past_blocked_threads(code)
    return code


class _UnjoinedExecutor(ThreadPoolExecutor):
    """The event loop's default executor (``asyncio.to_thread``: every table call), shut down
    without waiting for its threads, which ``asyncio.run`` would otherwise do before returning."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=cancel_futures)


def _exit_past_blocked_threads(code: ExitCode) -> None:
    """Exit with ``code`` now (logs flushed) if threads still run after ``EXIT_GRACE``.

    A silo that stopped has given up on its table calls, but one may still be blocked in its
    driver (a store that stopped answering, a lock held elsewhere) until the store's deadline,
    and a work handler may still run; Python would wait for such threads at exit, however long
    they take. Returns when there are none, so that a normal exit runs every ``atexit`` handler.
    """
    me = threading.current_thread()
    deadline = time.monotonic() + EXIT_GRACE
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    blocked = [thread.name for thread in threading.enumerate() if thread is not me and not thread.daemon]
    if not blocked:
        return
    log.warning(
        "exiting with code %d without waiting for %d thread(s) still running (%s), e.g. a table call blocked "
        "in its store's driver",
        code,
        len(blocked),
        ", ".join(blocked),
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


@dataclass(frozen=True)
class SiloStack:
    """A silo wired to its gRPC server and prober, not started yet (``assemble``)."""

    silo: Silo
    server: MembershipServer
    work: WorkService
    """The Work service the server runs (its calls in flight are what a drain waits for)."""
    prober: GrpcProber
    gateway_port: int
    """The extra gateway port (``0`` = none); the silo port serves the same services."""
    metrics: MetricsExport | None = None
    """The Prometheus metrics and their HTTP server, when ``metrics_port`` was set."""
    table: MembershipTable | None = None
    """The table the silo joins, read by ``admit`` before the join writes."""
    tls: bool = False
    """Whether the silo serves and calls over mutual TLS (``SiloProcessConfig.tls``)."""

    async def admit(self) -> None:
        """Raise ``AdmissionRefusedError`` if the cluster would refuse this silo (``silo.wire.admission``);
        the table is not written. A table that cannot be read yet skips the check (the join retries it)."""
        if self.table is None:
            return
        try:
            entries = (await asyncio.to_thread(self.table.read_all)).entries
        except MembershipTableError as exc:
            log.info("cannot read the table to check admission (%s); joining without the check", exc)
            return
        timeout = self.silo.options.probe_timeout
        await check_admission(self.prober, entries, tls=self.tls, timeout=timeout)

    async def start(self) -> None:
        """Serve, check admission, join, and report SERVING once Active (raises a ``SiloError`` on failure)."""
        await self.server.start(self.silo)
        await self.admit()
        await self.silo.start()
        await self.server.set_serving(self.silo.status == SiloStatus.ACTIVE)

    async def close(self) -> None:
        """Stop serving and close the prober's channels (after ``silo.stop()`` for a graceful leave)."""
        await self.server.stop(None)
        await self.prober.close()
        if self.metrics is not None:
            self.metrics.close()


def assemble(
    table: MembershipTable,
    config: SiloProcessConfig,
    wrap_prober: Callable[[Prober], Prober] | None = None,
    known_silos: Sequence[SiloAddress] | None = None,
) -> SiloStack:
    """Bind the metrics server if asked for, then the gRPC server (so the address has the real
    port), then build the silo; raises ``MetricsUnavailableError``, ``BindError`` or ``OptionsError``
    (a reserved property, unusable TLS files) with nothing left bound.

    ``wrap_prober`` (benchmarks only, e.g. injected probe loss) wraps the prober the silo probes
    with; gossip and ``SiloStack.prober`` stay the plain ``GrpcProber``. ``known_silos``: the
    table's silos, read once by a caller that assembles many silos at once (a whole table read
    each otherwise), for the generation (``next_generation``).
    """
    if TRANSPORT_PROPERTY in config.properties:
        raise OptionsError(
            f"property {TRANSPORT_PROPERTY!r} is set by the silo itself (transport=tls under TLS); drop that --property"
        )
    metrics = (
        MetricsExport.open(table, host=config.host, port=config.metrics_port, table_uri=config.table_uri)
        if config.metrics_port is not None
        else None
    )
    try:
        server = MembershipServer(config.host, config.port, tls=config.tls, reflection=config.reflection)
        gateway_port = server.add_port(config.gateway_port) if config.gateway_port is not None else 0
    except BaseException:
        if metrics is not None:
            metrics.close()
        raise
    known = read_known_silos(table) if known_silos is None else known_silos
    host, port = config.advertise_host or config.host, config.advertise_port or server.port
    generation = next_generation(time.time_ns() // 1_000_000, host, port, known)
    address = SiloAddress(host, port, generation=generation)
    timeout = config.options.probe_timeout
    prober = GrpcProber(config.cluster_id, address, gossip_timeout=timeout, tls=config.tls, connect_timeout=timeout)
    joined_table = table
    if metrics is not None:
        table = metrics.table
    if config.history_file:
        table = RecordingTable(table, str(address), JsonLinesSink(config.history_file))
    silo = Silo(
        table=table,
        address=address,
        options=config.options,
        prober=wrap_prober(prober) if wrap_prober else prober,
        gossip=metrics.gossip(prober) if metrics else prober,
        silo_name=config.name or f"silo-{server.port}",
        host_name=socket.gethostname(),
        proxy_port=gateway_port,
        properties=advertised_properties(config.properties, tls=config.tls is not None),
        observer=metrics.metrics if metrics else NULL_OBSERVER,
        trusted_gossip=config.tls is not None,
        claims=ClaimsFile(config.claims_file) if config.claims_file else None,
    )
    silo.on_fencing(lambda fenced: server.set_serving(not fenced))  # health NOT_SERVING while fenced

    async def admit_work(cluster_id: str, sender: Callable[[], str], context: Any, method: str) -> Silo:
        await server.admit_cluster(cluster_id, sender, context, method)  # aborts the call if not admitted
        return silo  # the silo the server serves

    work = WorkService(admit_work, config.handlers)
    server.add_service(work)
    if metrics is not None:
        metrics.metrics.watch(
            lambda: silo.snapshot, on_loop(asyncio.get_running_loop(), silo.health_score), lambda: silo.fenced
        )
        log.info("silo %s serves metrics at %s", address, metrics.server.url)
    return SiloStack(silo, server, work, prober, gateway_port, metrics, joined_table, config.tls is not None)


def read_known_silos(table: MembershipTable) -> list[SiloAddress]:
    """The silos in the table now, to keep generations increasing; none if it cannot be read yet
    (the join retries the table; a clock stepped back while the table is down is not covered)."""
    try:
        return [entry.silo_address for entry in table.read_all().entries]
    except MembershipTableError as exc:
        log.info("cannot read the table before choosing a generation (%s); using the clock", exc)
        return []


async def _serve(table: MembershipTable, config: SiloProcessConfig) -> ExitCode:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(_UnjoinedExecutor(thread_name_prefix="silo-blocking"))
    stop_requested = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_requested.set)
    known = await _unless_signalled(asyncio.to_thread(read_known_silos, table), stop_requested)
    if known is None:
        log.info("signalled while reading the table at start-up; exiting")
        return ExitCode.OK
    health: HealthServer | None = None
    try:
        if config.health_port is not None:
            health = await _open_health(config.host, config.health_port)
        stack = assemble(table, config, known_silos=known)
    except (BindError, MetricsUnavailableError, OptionsError) as exc:
        log.error("%s", exc)
        if health is not None:
            await health.close()
        return ExitCode.BAD_CONFIGURATION
    silo, server = stack.silo, stack.server
    server.on_drain = functools.partial(_request_stop, stop_requested)
    if health is not None:
        health.readiness = silo.readiness
        log.info("silo %s serves /livez and /readyz at %s", silo.silo_address, health.url)
    await server.start(silo)
    log.info("silo %s listening on %s:%d (%s)", silo.silo_address, config.host, server.port, transport_of(stack.tls))
    try:
        try:
            admitted = await _unless_signalled(_admit(stack), stop_requested)
        except AdmissionRefusedError as exc:
            log.error("silo %s will not join: %s", silo.silo_address, exc)
            return ExitCode.BAD_CONFIGURATION
        if admitted is None:
            log.info("silo %s signalled while checking its admission; exiting", silo.silo_address)
            return ExitCode.OK
        return await _lifetime(stack, stop_requested, config.shutdown_grace)
    finally:
        await stack.close()
        if health is not None:
            await health.close()


async def _admit(stack: SiloStack) -> bool:
    await stack.admit()
    return True


def _request_stop(stop_requested: asyncio.Event) -> bool:
    """A ``Drain`` call: drain as on SIGTERM; True if a stop was requested already."""
    already = stop_requested.is_set()
    stop_requested.set()
    return already


async def _open_health(host: str, port: int) -> HealthServer:
    try:
        return await HealthServer.open(host, port)
    except OSError as exc:
        raise BindError(
            f"cannot serve health at {host}:{port}: {exc}; pick another --health-port or free this one"
        ) from exc


async def _unless_signalled(work: Awaitable[_T], signalled: asyncio.Event) -> _T | None:
    """``work``'s result, or None (``work`` cancelled) if a signal comes first."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(signalled.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()


async def _lifetime(stack: SiloStack, stop_requested: asyncio.Event, grace: float) -> ExitCode:
    silo, server = stack.silo, stack.server
    signalled: asyncio.Future[Any] = asyncio.ensure_future(stop_requested.wait())
    try:
        if not await _join(silo, signalled, grace):
            return await silo.wait_terminated()
        await server.set_serving(True)
        log.info("silo %s is active", silo.silo_address)
        notify("READY=1")
        freeze_startup_objects()
        terminated = asyncio.ensure_future(silo.wait_terminated())
        await asyncio.wait({terminated, signalled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
    if terminated.done():
        log.error("silo %s terminated itself: %s", silo.silo_address, silo.termination_reason or "see above")
        return terminated.result()
    log.info("silo %s draining (shutdown grace %ss)", silo.silo_address, grace)
    if not await drain_and_stop(stack, grace):
        terminated.cancel()
        return ExitCode.OK
    return await terminated


STOP_ROLES_SECONDS = 2.0
"""Beyond the shutdown grace, how long a drained silo may take to stop its roles (cancel its
tasks, close its view) before the process exits without waiting for them."""


async def drain_and_stop(stack: SiloStack, grace: float, monotonic: Callable[[], float] = time.monotonic) -> bool:
    """Drain the silo within ``grace`` seconds: health NOT_SERVING, new Work refused, ShuttingDown
    written (routers move its keys), the Work calls in flight finished, Dead written, roles
    stopped. What cannot be done in time (an unreachable table, a handler still running) is
    logged at WARNING and left out. False if the silo had not stopped in time."""
    silo, server = stack.silo, stack.server
    deadline = monotonic() + grace
    notify("STOPPING=1")
    await server.set_serving(False)
    await silo.drain(within=grace)
    if not await stack.work.work_finished(deadline - monotonic()):
        log.warning(
            "silo %s: %d Work call(s) still running after the shutdown grace of %ss; they are cancelled",
            silo.silo_address, stack.work.work_in_flight, grace,
        )  # fmt: skip
    stopping = asyncio.ensure_future(silo.stop(within=max(0.0, deadline - monotonic())))
    done, _ = await asyncio.wait({stopping}, timeout=max(0.0, deadline - monotonic()) + STOP_ROLES_SECONDS)
    if not done:
        log.warning("silo %s did not stop within its shutdown grace of %ss; exiting anyway", silo.silo_address, grace)
        return False
    return True


async def _join(silo: Silo, signalled: asyncio.Future[Any], grace: float) -> bool:
    """Join the cluster; False if the join failed or a signal interrupted it (the silo is then stopped)."""
    joining: asyncio.Future[Any] = asyncio.ensure_future(silo.start())
    await asyncio.wait({joining, signalled}, return_when=asyncio.FIRST_COMPLETED)
    if not joining.done():
        log.info("silo %s signalled while joining; leaving", silo.silo_address)
        notify("STOPPING=1")
        await silo.stop(within=grace)
    try:
        await joining
    except SiloError as exc:
        # the runtime has logged why; say what the process does about it
        log.error(
            "silo %s could not start: exiting with code %d (%s)", silo.silo_address, exc.exit_code, exc.exit_code.name
        )
        return False
    return silo.status == SiloStatus.ACTIVE
