"""Run a turncore worker: `python worker.py` or `python -m turncore_temporal.worker` (configured by environment).

TEMPORAL_ADDRESS (unset: the work dir's embedded dev server), TEMPORAL_NAMESPACE
(default), TEMPORAL_API_KEY or TEMPORAL_TLS_CLIENT_CERT_PATH /
TEMPORAL_TLS_CLIENT_KEY_PATH for Temporal Cloud (every TEMPORAL_* variable
``temporalio.envconfig`` reads), TURNS_HOME (the work dir holding
turns.toml, storage/ and workspace/; unset: the nearest .turns/ here or above,
else ./.turns), TURNS_CONFIG, TURNS_TASK_QUEUE (turns),
TURNS_LOG_LEVEL (INFO), TURNS_MIGRATE (1: create or migrate the turn
database's schema first, with [storage] kind = "postgres"; the URL is in
the variable [storage] url_env names, TURNS_DATABASE_URL by default),
TURNS_METRICS ([HOST]:PORT: serve Prometheus metrics there), OTEL_* (traces,
with turncore[otel]). See docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio.client import Client
from temporalio.runtime import Runtime as TemporalRuntime
from temporalio.service import RPCError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from turnclient.runtime.connection import ConnectOptions, Runtime, Temporal, temporal
from turnclient.runtime.embedded import is_server_process
from turnclient.runtime.storage import MIGRATE_ENV
from turncore.errors import TurnError
from turncore_temporal.activities import ACTIVITY_NAMES, DATA_CONVERTER
from turncore_temporal.activities.turn_activities import TurnActivities, TurnDependencies
from turncore_temporal.workflows import TurnWorkflow
from turncore_temporal.workflows.turn import TURN_PENDING, pending_count

log = logging.getLogger("turncore.worker")

DEFAULT_TASK_QUEUE = "turns"

# What the sandbox shares with the worker instead of re-importing it for every
# workflow run: deterministic third-party libraries, turncore (pure: no
# Temporal, and the workflow calls only its decisions and reducer), and the
# activity contract (signatures, payload types, error mapping). The workflow
# module itself is NOT passed through: its code runs under the sandbox's
# restrictions, so a clock, random, uuid or file call in it fails the
# workflow task (tests/test_sandbox.py). Sharing the payload types also keeps
# the data converter's type adapters built once per worker, not once per run.
PASSTHROUGH = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "orjson",
    "turncore",
    "turncore_temporal.activities.contract",
    "turncore_temporal.activities.failures",
    "turncore_temporal.activities.payloads",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


def typed_client(client: Client) -> Client:
    """``client`` with the turn payloads' data converter (the same connection).

    The client's payload codec (encryption, ``[temporal] payload_key_env``) is
    kept: only the converter underneath it is swapped.
    """
    current = client.data_converter
    if (
        current.payload_converter_class is DATA_CONVERTER.payload_converter_class
        and current.failure_converter_class is DATA_CONVERTER.failure_converter_class
    ):
        return client
    config = client.config()
    config["data_converter"] = dataclasses.replace(
        DATA_CONVERTER, payload_codec=current.payload_codec
    )
    return Client(**config)


STICKY_QUEUE_TIMEOUT = timedelta(seconds=1.5)
"""How long a turn's next workflow task waits on the sticky queue of the worker
that ran its last one before any worker may take it (and replay the history).
Temporal's default is 10 s: an input to a turn whose worker was SIGKILLed then
waited 10 s for a worker that no longer exists. A worker that shuts down
releases its sticky queue, so a graceful restart never waits for this."""


def build_worker(
    client: Client,
    deps: TurnDependencies,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    activities: TurnActivities | None = None,
    max_concurrent_activities: int = 64,
    graceful_shutdown: timedelta = timedelta(0),
) -> Worker:
    """A worker for the Turn workflow and its activities.

    ``activities`` replaces the activities built from ``deps`` (tests pass a
    subclass of ``TurnActivities`` that injects faults under the real names).
    """
    acts = activities if activities is not None else TurnActivities(deps)
    return Worker(
        typed_client(client),
        task_queue=task_queue,
        workflows=[TurnWorkflow],
        activities=[getattr(acts, name) for name in ACTIVITY_NAMES],
        workflow_runner=workflow_runner(),
        activity_executor=ThreadPoolExecutor(max_workers=max_concurrent_activities),
        max_concurrent_activities=max_concurrent_activities,
        # Cancellation reaches an activity with the reply to a heartbeat, so
        # heartbeats go out at least every second (not every 0.8 × timeout).
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        default_heartbeat_throttle_interval=timedelta(seconds=1),
        # How long a stopping worker lets running activities finish before
        # cancelling them (a long-lived `turns worker` waits; tests do not).
        graceful_shutdown_timeout=graceful_shutdown,
        sticky_queue_schedule_to_start_timeout=STICKY_QUEUE_TIMEOUT,
    )


def build_turn_worker(
    runtime: Runtime, client: Client, *, graceful_shutdown: timedelta = timedelta(0)
) -> Worker:
    return build_worker(
        client, runtime.deps, task_queue=runtime.task_queue, graceful_shutdown=graceful_shutdown
    )


@contextlib.asynccontextmanager
async def serving(
    runtime: Runtime, client: Client, *, graceful_shutdown: timedelta = timedelta(0)
) -> AsyncIterator[Worker]:
    """Run a worker in this process for the block; it is shut down when the block ends."""
    worker = build_turn_worker(runtime, client, graceful_shutdown=graceful_shutdown)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        if not task.done():
            await worker.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await task


PENDING_EVERY = 15.0
"""Seconds between two counts of pending approvals (a visibility query each)."""


async def report_pending_approvals(
    client: Client, task_queue: str, *, every: float = PENDING_EVERY, limit: int = 10_000
) -> None:
    """Keep the ``turncore_pending_approvals`` gauge current until cancelled.

    The count comes from Temporal visibility — the ``TurnPendingInputs``
    search attribute every suspended turn on the task queue publishes — so
    every worker of the queue reports the same cluster-wide number (and a
    restarted worker reports it at once), rather than the approvals its own
    process happened to see.
    """
    runtime = client.service_client.config.runtime or TemporalRuntime.default()
    gauge = runtime.metric_meter.create_gauge(
        "turncore_pending_approvals", "Tool calls waiting for a permission decision", "calls"
    )
    query = (
        "WorkflowType = 'Turn' AND ExecutionStatus = 'Running' "
        f"AND TurnStatus = 'suspended' AND TaskQueue = '{task_queue}'"
    )
    while True:
        try:
            pending = 0
            async for wf in client.list_workflows(query, limit=limit):
                listed = wf.typed_search_attributes.get(TURN_PENDING) or ""
                pending += pending_count(listed, "permission")
            gauge.set(pending, {"task_queue": task_queue})
        except RPCError as exc:  # visibility is down for a moment: keep the last value
            log.warning("cannot count pending approvals: %s", exc)
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def pending_approvals_reported(
    client: Client, task_queue: str, *, every: float = PENDING_EVERY
) -> AsyncIterator[None]:
    task = asyncio.create_task(report_pending_approvals(client, task_queue, every=every))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_worker(
    runtime: Runtime,
    *,
    env: Mapping[str, str] | None = None,
    on_ready: Callable[[Temporal], None] | None = None,
    ui: bool = False,
    ui_port: int | None = None,
    port: int | None = None,
    worker: bool = True,
    graceful_shutdown: timedelta = timedelta(seconds=30),
    metrics: str | None = None,
    around: Callable[[Temporal], contextlib.AbstractAsyncContextManager[object]] | None = None,
) -> None:
    """Serve turns until SIGINT or SIGTERM (``turns worker``, ``turns dev``, ``worker.py``).

    On the embedded server, a server that dies (killed, crashed) is noticed
    within a second: the worker is stopped, the command leaves the dead
    server and joins again, which starts a new server on the same database
    under the embedded lock (never two), and serves that. ``on_ready`` is
    called again each time. Without this the worker would poll a dead port
    while the next command started a second server nobody served.

    ``around`` is entered once connected (and the worker runs), before
    ``on_ready``: ``turns dev`` serves the web UI in it.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    options = ConnectOptions.for_config(runtime.config, env, metrics=metrics)
    try:
        while not stop.is_set():
            lost: str | None = None
            try:
                async with temporal(
                    runtime.work_dir, env=env, ui=ui, ui_port=ui_port, port=port, options=options
                ) as conn:
                    async with contextlib.AsyncExitStack() as stack:
                        if worker:
                            await stack.enter_async_context(
                                serving(runtime, conn.client, graceful_shutdown=graceful_shutdown)
                            )
                            if metrics is not None:
                                await stack.enter_async_context(
                                    pending_approvals_reported(conn.client, runtime.task_queue)
                                )
                        if around is not None:
                            await stack.enter_async_context(around(conn))
                        if on_ready is not None:
                            on_ready(conn)
                        lost = await _until_stopped_or_lost(conn, stop)
            except RuntimeError as exc:
                # A worker that lost its server as it started fails its start-up
                # check; that is the loss we handle, anything else is raised.
                if lost is None:
                    raise
                log.info("the worker ended with its server: %s", exc)
            if lost is None:
                return
            message = f"{lost}; starting a new one on the same database"
            log.warning("%s", message)
            print(message, file=sys.stderr, flush=True)
            await asyncio.sleep(_RESTART_PAUSE)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


_RESTART_PAUSE = 0.5
"""Between losing the embedded server and starting another (a server that dies at
once again is not restarted in a tight loop)."""


async def _until_stopped_or_lost(conn: Temporal, stop: asyncio.Event) -> str | None:
    """Wait for ``stop``; None then. On the embedded server, return why it was lost if it died."""
    server = conn.server
    info = server.info if server is not None else None
    while not stop.is_set():
        if info is not None and not is_server_process(info.pid, info.db):
            return f"the embedded Temporal server (pid {info.pid}) died"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=_WATCH_INTERVAL)
    return None


_WATCH_INTERVAL = 0.5


async def run_worker_from_env() -> None:
    """``python worker.py``: a worker configured by the environment (see worker.py)."""
    logging.basicConfig(
        level=os.environ.get("TURNS_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    runtime = Runtime.from_work_dir(migrate=os.environ.get(MIGRATE_ENV, "") in ("1", "true"))

    def ready(conn: Temporal) -> None:
        log.info(
            "serving turns of %s on task queue %r at %s (namespace %s)",
            runtime.work_dir,
            runtime.task_queue,
            conn.address,
            conn.namespace,
        )

    await run_worker(runtime, on_ready=ready, metrics=_metrics_from_env())


def _metrics_from_env() -> str | None:
    """``TURNS_METRICS=[HOST]:PORT`` serves Prometheus metrics (as ``turns worker --metrics``)."""
    from turnclient.runtime.config import ConfigError
    from turnclient.runtime.telemetry import metrics_address

    given = os.environ.get("TURNS_METRICS")
    try:
        return metrics_address(given) if given else None
    except ValueError as exc:
        raise ConfigError(f"TURNS_METRICS: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """Run the worker; a configuration or storage problem is one line on stderr, exit 1.

    It is configured by the environment only: ``--help`` prints how, and any
    other argument is refused (exit 2) rather than ignored.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m turncore_temporal.worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`turns worker` is the same worker with flags (`turns worker --help`).",
    )
    parser.parse_args(sys.argv[1:] if argv is None else argv)  # exits on --help or a mistake
    try:
        asyncio.run(run_worker_from_env())
    except TurnError as exc:  # ConfigError, an unreachable turn database, ...
        print(f"turncore worker: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from turnclient.runtime.process import leave

    leave(main())  # never finalise under the SDK's threads (see turnclient.runtime.process)
