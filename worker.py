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
TURNS_METRICS ([HOST]:PORT: serve Prometheus metrics there), TURNS_DEPLOYMENT_NAME /
TURNS_BUILD_ID / TURNS_VERSIONING (worker deployment versioning), TURNS_APP
(MODULE:ATTR: the app whose agents, tools and models to serve; also ``--app
MODULE:ATTR`` on the command line, or app = in turns.toml), OTEL_* (traces,
with turncore[otel]). See docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio.bridge.proto.workflow_activation import RemoveFromCache, WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.converter import (
    DataConverter,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.runtime import Runtime as TemporalRuntime
from temporalio.service import RPCError
from temporalio.worker import (
    Worker,
    WorkerDeploymentConfig,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import Info

from turnclient.lib.api import TurnClient
from turnclient.lib.stuck import NON_DETERMINISM as STUCK_NONDETERMINISM
from turnclient.runtime.config import ConfigError, WorkerVersioning
from turnclient.runtime.connection import ConnectOptions, Runtime, Temporal, temporal
from turnclient.runtime.embedded import is_server_process
from turnclient.runtime.notify import Notifier, NotifyConfigError, Webhook, notify_dir
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
    # Structured output is checked by the loop's decisions (turncore.output),
    # with jsonschema: pure validation, no remote $ref retrieval.
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "rpds",
    "attrs",
    "attr",
    "turncore",
    "turncore_temporal.activities.contract",
    "turncore_temporal.activities.failures",
    "turncore_temporal.activities.payloads",
    "turncore_temporal.workflows._types",
)


SANDBOXED_MODULES = ("turncore_temporal.workflows", "turncore_temporal.workflows.turn")
"""The modules the sandbox imports afresh for every workflow run."""


class _CompiledOnce(importlib.abc.MetaPathFinder):
    """Serves the sandboxed workflow modules from code compiled once per process.

    The sandbox re-imports the workflow module for every workflow run. Where
    no bytecode is cached (``PYTHONDONTWRITEBYTECODE``, a source checkout)
    that compiled ``turn.py`` from source each time: a tenth of a loaded
    worker's CPU. Code objects are immutable, so one per module is shared by
    every run; the module itself is still executed afresh in each sandbox.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self._names = frozenset(names)
        self._code: dict[str, Any] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if type(loader) is importlib.machinery.SourceFileLoader:
                spec.loader = _CachedCodeLoader(loader.name, loader.path, self._code)
            return spec
        return None


class _CachedCodeLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, cache: dict[str, Any]) -> None:
        super().__init__(fullname, path)
        self._cache = cache

    def get_code(self, fullname: str) -> Any:
        code = self._cache.get(self.path)
        if code is None:
            code = self._cache[self.path] = super().get_code(fullname)
        return code


_COMPILED_ONCE = _CompiledOnce(SANDBOXED_MODULES)


def workflow_runner() -> SandboxedWorkflowRunner:
    if _COMPILED_ONCE not in sys.meta_path:
        sys.meta_path.insert(0, _COMPILED_ONCE)
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


NON_DETERMINISM = "non-determinism after a code change"


class FailingTasks:
    """Says once, at WARNING, that a turn's workflow task fails, and how to fix it.

    Temporal retries a failed workflow task about every ten seconds, forever;
    the SDK's own lines repeat with each attempt and name the run, not the
    turn. This names the turn, the cause (non-determinism after a code change,
    or the failure's own words) and the fix, once per turn and cause. A turn
    not seen failing for ``QUIET`` seconds is forgotten, so a failure after
    it was fixed is reported anew. Called from the workflow threads, hence
    the lock.
    """

    LIMIT = 10_000
    """Turns remembered at most (the oldest are forgotten first)."""

    QUIET = 120.0
    """Seconds without a failure after which a turn's next failure is said again."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        on_nondeterminism: Callable[[str], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._said: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._on_nondeterminism = on_nondeterminism
        """Called (from a workflow thread) at each non-determinism failure: the self-heal."""

    def failed(self, turn_id: str, cause: str) -> None:
        if self._on_nondeterminism is not None and cause.startswith(NON_DETERMINISM):
            self._on_nondeterminism(turn_id)
        now = self._clock()
        with self._lock:
            said = self._said.get(turn_id)
            self._said[turn_id] = (cause, now)
            self._said.move_to_end(turn_id)
            while len(self._said) > self.LIMIT:
                self._said.popitem(last=False)
        if said is not None and said[0] == cause and now - said[1] < self.QUIET:
            return
        log.warning(
            "turn %s: its workflow task fails (%s) and Temporal retries it; commands waiting on "
            "the turn report it stuck. Fix: turns recover %s (terminates the run and starts a new "
            "one from the turn's file), or roll the workers back to code that replays it",
            turn_id,
            cause,
            turn_id,
        )


class SelfHeal:
    """Rebuilds a turn from its file once its run failed ``after`` workflow tasks on
    non-determinism (``[temporal] rebuild_stuck_after``; off by default).

    The count is the server's (the pending task's attempt), so it holds across
    every worker of the queue. The rebuild is ``TurnClient.rebuild``: the run is
    terminated and a new one starts from the file, exactly as ``turns recover``
    does; inputs the stuck run had not accepted were already refused to their
    senders. One check per turn at a time; failures are logged, never raised.
    """

    def __init__(self, turns: TurnClient, after: int, loop: asyncio.AbstractEventLoop) -> None:
        self._turns = turns
        self._after = after
        self._loop = loop
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, turn_id: str) -> None:
        """From a workflow thread: check the turn on the worker's loop."""
        self._loop.call_soon_threadsafe(self._start, turn_id)

    def _start(self, turn_id: str) -> None:
        if turn_id in self._busy:
            return
        self._busy.add(turn_id)
        task = self._loop.create_task(self._check(turn_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(self, turn_id: str) -> None:
        try:
            stuck = await self._turns.stuck(turn_id)
            if stuck is None or stuck.kind != STUCK_NONDETERMINISM:
                return
            if stuck.attempts - 1 < self._after:
                return  # the next failure checks again
            if await self._turns.rebuild(turn_id) is not None:
                log.warning(
                    "turn %s: rebuilt from its file after %d failed workflow tasks (%s): "
                    "its run was terminated and a new one started",
                    turn_id,
                    stuck.attempts - 1,
                    stuck.cause,
                )
        except TurnError as exc:
            log.warning("turn %s: could not rebuild it from its file: %s", turn_id, exc)
        finally:
            self._busy.discard(turn_id)


def contexts_matter(converter: DataConverter) -> bool:
    """Whether encoding through ``converter`` depends on a payload's serialization
    or storage context: only a codec that takes contexts, or external storage.

    The SDK asks the workflow instance for both contexts for every payload it
    encodes or decodes, and a sandboxed instance answers by executing code in
    its sandbox: ~8% of a busy worker's samples. Where the answer cannot
    change a byte (no codec, or one like ``EncryptionCodec`` that ignores
    contexts, and no external storage), ``WatchedRunner`` answers itself.
    """
    return converter.external_storage is not None or isinstance(
        converter.payload_codec, WithSerializationContext
    )


class WatchedRunner(WorkflowRunner):
    """The sandboxed runner, with every activation's fate reported to ``FailingTasks``.

    With ``contexts_matter`` False, its instances give every payload the
    workflow's own contexts without entering the sandbox (``contexts_matter``).
    """

    def __init__(
        self,
        inner: WorkflowRunner,
        tasks: FailingTasks | None = None,
        *,
        contexts_matter: bool = True,
    ) -> None:
        self._inner = inner
        self._tasks = tasks or FailingTasks()
        self._contexts_matter = contexts_matter

    def prepare_workflow(self, defn: Any) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        inner = self._inner.create_instance(det)
        if self._contexts_matter:
            return _WatchedInstance(inner, self._tasks)
        return _ContextFreeInstance(inner, self._tasks)

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._inner.set_worker_level_failure_exception_types(types)


class _WatchedInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, tasks: FailingTasks) -> None:
        self._inner = inner
        self._tasks = tasks

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._inner.activate(act)
        turn_id = self._inner.get_info().workflow_id
        for job in act.jobs:
            if job.HasField("remove_from_cache"):
                evicted = job.remove_from_cache
                if evicted.reason == RemoveFromCache.EvictionReason.NONDETERMINISM:
                    self._tasks.failed(
                        turn_id, f"{NON_DETERMINISM}: {_first_line(evicted.message)}"
                    )
                return completion
        if completion.HasField("failed"):
            self._tasks.failed(turn_id, _first_line(completion.failed.failure.message))
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Info:
        return self._inner.get_info()


class _ContextFreeInstance(_WatchedInstance):
    """A watched instance whose payload contexts are the workflow's own, answered
    outside the sandbox: used only where ``contexts_matter`` is False, so no
    encoded byte depends on them."""

    def __init__(self, inner: WorkflowInstance, tasks: FailingTasks) -> None:
        super().__init__(inner, tasks)
        info = inner.get_info()
        self._serialization = WorkflowSerializationContext(
            namespace=info.namespace, workflow_id=info.workflow_id
        )
        self._store = StorageDriverStoreContext(
            target=StorageDriverWorkflowInfo(
                id=info.workflow_id,
                run_id=info.run_id,
                type=info.workflow_type,
                namespace=info.namespace,
            )
        )

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._serialization

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._store


def _first_line(text: str, limit: int = 300) -> str:
    # Core wraps its own failure in a debug rendering: keep the message inside.
    inner = re.search(r'message: "((?:[^"\\]|\\.)*)"', text)
    if inner is not None:
        text = inner.group(1)
    line = text.strip().splitlines()[0] if text.strip() else "no message"
    return line if len(line) <= limit else line[: limit - 1] + "…"


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
    workflow: type = TurnWorkflow,
    versioning: WorkerVersioning | None = None,
    rebuild_stuck_after: int | None = None,
    turns: TurnClient | None = None,
) -> Worker:
    """A worker for the Turn workflow and its activities.

    ``activities`` replaces the activities built from ``deps`` (tests pass a
    subclass of ``TurnActivities`` that injects faults under the real names);
    ``workflow`` replaces the workflow class (tests pass a changed copy, as a
    deploy of new worker code would bring). ``versioning`` makes it a worker
    of one version of a Temporal worker deployment (docs/operations.md,
    "Deploying new worker code"). ``rebuild_stuck_after`` (with ``turns``, the
    client to rebuild through) turns on the self-heal (``SelfHeal``).
    """
    acts = activities if activities is not None else TurnActivities(deps)
    heal = None
    if rebuild_stuck_after is not None and turns is not None:
        heal = SelfHeal(turns, rebuild_stuck_after, asyncio.get_running_loop())
    typed = typed_client(client)
    return Worker(
        typed,
        task_queue=task_queue,
        workflows=[workflow],
        activities=[getattr(acts, name) for name in ACTIVITY_NAMES],
        workflow_runner=WatchedRunner(
            workflow_runner(),
            FailingTasks(on_nondeterminism=heal),
            contexts_matter=contexts_matter(typed.data_converter),
        ),
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
        deployment_config=deployment_config(versioning),
    )


def deployment_config(versioning: WorkerVersioning | None) -> WorkerDeploymentConfig | None:
    """Temporal's worker deployment options for ``versioning`` (None: unversioned)."""
    if versioning is None:
        return None
    behavior = (
        VersioningBehavior.PINNED
        if versioning.behavior == "pinned"
        else VersioningBehavior.AUTO_UPGRADE
    )
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(
            deployment_name=versioning.deployment_name, build_id=versioning.build_id
        ),
        use_worker_versioning=True,
        default_versioning_behavior=behavior,
    )


def build_turn_worker(
    runtime: Runtime,
    client: Client,
    *,
    graceful_shutdown: timedelta = timedelta(0),
    deps: TurnDependencies | None = None,
) -> Worker:
    """``deps``: the runtime's, unless given (``serving`` adds the webhook observer)."""
    return build_worker(
        client,
        deps if deps is not None else runtime.deps,
        task_queue=runtime.task_queue,
        graceful_shutdown=graceful_shutdown,
        versioning=runtime.config.versioning,
        rebuild_stuck_after=runtime.config.rebuild_stuck_after,
        turns=runtime.turn_client(client),
    )


@contextlib.asynccontextmanager
async def serving(
    runtime: Runtime, client: Client, *, graceful_shutdown: timedelta = timedelta(0)
) -> AsyncIterator[Worker]:
    """Run a worker in this process for the block; it is shut down when the block ends.

    With ``[notify]`` configured, the worker also sends the webhook notifications
    of the turns it advances (``turnclient.runtime.notify``), from its own task, for the
    block; a webhook that cannot be resolved (a variable unset, a URL that is
    not http(s)) is a ``ConfigError`` before the worker starts.
    """
    notifier = notifier_for(runtime)
    deps = runtime.deps
    if notifier is not None:
        deps = dataclasses.replace(deps, on_appended=notifier.observe)
    worker = build_turn_worker(runtime, client, graceful_shutdown=graceful_shutdown, deps=deps)
    if runtime.mcp is not None:
        runtime.mcp.serve()
    async with contextlib.AsyncExitStack() as stack:
        if notifier is not None:
            await stack.enter_async_context(notifier.running())
        task = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            try:
                if not task.done():
                    await worker.shutdown()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            finally:
                if runtime.mcp is not None:  # the stdio servers this worker started stop with it
                    await runtime.mcp.close()


def notifier_for(runtime: Runtime, env: Mapping[str, str] | None = None) -> Notifier | None:
    """The webhook notifier ``[notify]`` asks for, or None; raises ``ConfigError``."""
    table = runtime.config.notify
    if table is None:
        return None
    try:
        webhook = Webhook.resolve(table, os.environ if env is None else env)
    except NotifyConfigError as exc:
        raise ConfigError(str(exc)) from None
    return Notifier(webhook, notify_dir(runtime.work_dir), runtime.repository)


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
                    served = conn.server.info if conn.server is not None else None
                    if served is not None:
                        # Clients now use the ports this server got, not the ones asked
                        # for where those were taken: a replacement asks for these, or
                        # `turns dev` and its Temporal Web would move at every restart.
                        if port:
                            port = served.port
                        if ui_port:
                            ui_port = served.ui_port or ui_port
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

    It is configured by the environment: ``--help`` prints how, and an argument
    it does not know is refused (exit 2) rather than ignored.
    ``--app MODULE:ATTR`` names the app to serve (as ``TURNS_APP``); a name that
    does not load (no such module or attribute, not an app) is exit 2.
    """
    import argparse

    from turnclient.runtime.app import AppError

    parser = argparse.ArgumentParser(
        prog="python -m turncore_temporal.worker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`turns worker` is the same worker with flags (`turns worker --help`).",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="serve this app's agents, tools and models (default $TURNS_APP, or app = in "
        "turns.toml)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.app is not None:
        from pathlib import Path

        from turnclient.runtime.app import load_app
        from turnclient.runtime.config import work_dir_from_env

        try:  # loaded here first, so a problem names --app rather than TURNS_APP
            load_app(args.app, [Path.cwd(), work_dir_from_env()], "--app")
        except AppError as exc:
            print(f"turncore worker: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2 if exc.usage else 1
        os.environ["TURNS_APP"] = args.app
    try:
        asyncio.run(run_worker_from_env())
    except TurnError as exc:  # ConfigError, an unreachable turn database, ...
        print(f"turncore worker: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2 if isinstance(exc, AppError) and exc.usage else 1
    return 0


if __name__ == "__main__":
    from turnclient.runtime.process import leave

    leave(main())  # never finalise under the SDK's threads (see turnclient.runtime.process)
