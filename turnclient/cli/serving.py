"""``turns ui``: the approval and live-view web UI, its JSON API and SSE, in one process.

Kept apart from ``turnclient.cli`` (which imports this module to register
the command): the web stack (Starlette, uvicorn) is imported only when the
command runs, and it is an optional extra (``ui``).
``dev_web_ui`` is what ``turns dev`` serves next to Temporal Web.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from turnclient.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    JSON,
    NO_WORKER,
    Failure,
    arg,
    command,
    current_work_dir,
    emit_json,
    migrate_requested,
    open_runtime,
    report_failure,
    run_async,
    run_sync,
)

if TYPE_CHECKING:
    import asyncio

    from temporalio.client import Client

    from turnclient.runtime.connection import Runtime, Temporal


def missing_ui() -> str:
    """Why ``turns ui`` cannot run, and the install command that fixes it (read when needed:
    the hint reads the installed metadata, which costs every command's start-up)."""
    from turnclient.runtime.extras import install_hint

    return f"the web UI needs starlette and uvicorn: {install_hint('ui')}"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("a port is 0..65535 (0: any free port)")
    return value


@command(
    "ui",
    "serve the web UI and its JSON/SSE API for approving and watching turns (with a worker)",
    arg("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback)"),
    arg("--port", type=_port, default=8300, metavar="PORT", help="port (default 8300; 0: any)"),
    arg(
        "--token",
        metavar="TOKEN",
        help="require this token on every request (default $TURNS_UI_TOKEN); "
        "needed to bind anything but loopback",
    ),
    arg(
        "--tokens-file",
        metavar="PATH",
        help="a file of `NAME SHA256-OF-TOKEN` lines (default $TURNS_UI_TOKENS_FILE): "
        "each person's own token, and decisions record the name",
    ),
    NO_WORKER,
    JSON,
)
def ui(args: argparse.Namespace) -> int:
    async def body() -> int:
        try:
            from turnclient.servers.ui import (
                UiConfigError,
                check_token,
                create_app,
                load_tokens,
                token_from,
                web_ui,
            )
        except ImportError:
            raise Failure(missing_ui()) from None
        from turnclient.runtime.connection import Runtime, temporal
        from turncore_temporal.worker import serving

        try:
            tokens = load_tokens(args.tokens_file)
            token = check_token(args.host, token_from(args.token), tokens_file=tokens is not None)
        except UiConfigError as exc:
            raise Failure(str(exc), EXIT_USAGE) from None
        runtime = Runtime.from_work_dir()
        async with temporal(runtime.work_dir) as conn, contextlib.AsyncExitStack() as stack:
            if not args.no_worker:
                await stack.enter_async_context(serving(runtime, conn.client))
            app = create_app(
                runtime, conn.client, token=token, tokens=tokens, serving=not args.no_worker
            )
            async with web_ui(app, args.host, args.port) as web:
                opened = f"{web.url}/?token={token}" if token else f"{web.url}/"
                if args.json:
                    emit_json(
                        {
                            "url": web.url,
                            "open": opened,
                            "temporal": conn.address,
                            "worker": not args.no_worker,
                            "workDir": str(runtime.work_dir),
                        }
                    )
                else:
                    print(f"web UI        {opened}")
                    print(f"Temporal      {conn.address} (namespace {conn.namespace})")
                    if not args.no_worker:
                        print(f"worker        task queue {runtime.task_queue}")
                    print("Ctrl-C to stop.", flush=True)
                await _until_stopped(web.stopped)
        return EXIT_OK

    return run_async(args, body)


async def _until_stopped(server: asyncio.Task[None]) -> None:
    import asyncio  # here, not at import: read-only commands never load it

    """Until SIGINT or SIGTERM (then the caller's blocks stop the server and worker), or
    the server fails on its own."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({server, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if server.done():
            server.result()  # raises why it stopped
    finally:
        waiter.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def dev_web_ui(
    runtime: Runtime, client: Client, port: int, *, serving: bool = True
) -> AsyncIterator[str | None]:
    """The web UI on loopback for ``turns dev`` (a free port if ``port`` is taken); None if
    the extra is not installed."""
    try:
        from turnclient.servers.ui import create_app, web_ui
    except ImportError:
        yield None
        return
    app = create_app(runtime, client, serving=serving)
    async with web_ui(app, "127.0.0.1", port, fallback=True) as web:
        yield f"{web.url}/"


__all__ = ["dev_web_ui", "ui"]


# ---------------------------------------------------------------- serving


DEV_PORT = 7233
"""``turns dev``'s gRPC port: the stock ``temporal server start-dev`` default, so stock tools
and other apps find the server without being told."""


@command(
    "dev",
    "run the embedded dev server with Temporal Web and a worker in the foreground",
    arg(
        "--port",
        type=int,
        default=DEV_PORT,
        metavar="PORT",
        help=f"Temporal's gRPC port (default {DEV_PORT}, or a free one when it is taken)",
    ),
    arg(
        "--ui-port",
        type=int,
        default=8233,
        metavar="PORT",
        help="Temporal Web port (default 8233, or a free one)",
    ),
    arg("--no-worker", action="store_true", help="serve Temporal only; workers run elsewhere"),
    arg(
        "--web-port",
        type=int,
        default=8300,
        metavar="PORT",
        help="the turns web UI's port on loopback (default 8300, or a free one; see `turns ui`)",
    ),
    arg("--no-web", action="store_true", help="do not serve the turns web UI"),
    JSON,
)
def dev(args: argparse.Namespace) -> int:
    from turnclient.runtime.connection import uses_embedded

    if not uses_embedded():
        return report_failure(
            args,
            EXIT_USAGE,
            "turns dev runs the embedded server, but TEMPORAL_ADDRESS is set; "
            "use `turns worker` to serve that server",
        )
    return _serve(args, ui=True, worker=not args.no_worker, web=not args.no_web)


@command(
    "worker",
    "run a worker in the foreground (TEMPORAL_ADDRESS, or the embedded server)",
    JSON,
    arg(
        "--migrate",
        action="store_true",
        help="create or migrate the turn database's schema first (also TURNS_MIGRATE=1)",
    ),
    arg(
        "--metrics",
        metavar="[HOST]:PORT|otlp",
        help="serve Prometheus metrics (turncore's and Temporal's) at this address, e.g. :9464; "
        "otlp: push them to the OTEL_EXPORTER_OTLP_* collector",
    ),
)
def worker(args: argparse.Namespace) -> int:
    return _serve(args, ui=False, worker=True)


def _serve(args: argparse.Namespace, *, ui: bool, worker: bool, web: bool = False) -> int:
    async def body() -> int:
        from turncore_temporal.worker import run_worker

        runtime = open_runtime(migrate=migrate_requested(args))
        web_url: list[str | None] = []

        @contextlib.asynccontextmanager
        async def serve_web(conn: Temporal) -> AsyncIterator[None]:
            async with dev_web_ui(runtime, conn.client, args.web_port, serving=worker) as url:
                web_url[:] = [url]  # a replaced embedded server serves the UI anew
                yield

        def ready(conn: Temporal) -> None:
            info = {
                "address": conn.address,
                "namespace": conn.namespace,
                "uiUrl": conn.ui_url,
                "taskQueue": runtime.task_queue,
                "workDir": str(runtime.work_dir),
                "worker": worker,
                "embedded": conn.server is not None,
            }
            if web:
                info["webUrl"] = web_url[0] if web_url else None
            if args.json:
                emit_json(info)
                return
            print(f"Temporal      {conn.address} (namespace {conn.namespace})")
            if conn.server is not None:
                print(f"database      {conn.server.db}")
                for note in conn.server.notes:
                    print(f"              {note}")
            if ui:
                print(f"Temporal Web  {conn.ui_url or 'off (a headless server is in use)'}")
            if web:
                shown = web_url[0] if web_url else None
                from turnclient.runtime.extras import install_hint

                print(f"turns web UI  {shown or 'off: ' + install_hint('ui')}")
            if worker:
                print(f"worker        task queue {runtime.task_queue}, work dir {runtime.work_dir}")
            print("Ctrl-C to stop.", flush=True)

        await run_worker(
            runtime,
            on_ready=ready,
            ui=ui,
            ui_port=getattr(args, "ui_port", None),
            port=getattr(args, "port", None),
            worker=worker,
            metrics=_metrics_address(args),
            around=serve_web if web else None,
        )
        return EXIT_OK

    return run_async(args, body, log_level="INFO" if worker else "ERROR")


# ---------------------------------------------------------------- observability


def _metrics_address(args: argparse.Namespace) -> str | None:
    """``--metrics [HOST]:PORT`` as the runtime's bind address (None: no endpoint)."""
    from turnclient.runtime.telemetry import metrics_address

    given: str | None = getattr(args, "metrics", None)
    if given is None:
        return None
    try:
        return metrics_address(given)
    except ValueError as exc:
        raise Failure(str(exc), EXIT_USAGE) from None


@command(
    "codec-server",
    "serve /encode and /decode for Temporal Web and the temporal CLI with the payload keys",
    arg("--port", type=int, default=8888, metavar="PORT", help="port (default 8888; 0: any)"),
    arg("--host", default="127.0.0.1", metavar="HOST", help="bind address (default 127.0.0.1)"),
    arg(
        "--origin",
        action="append",
        metavar="URL",
        help="a browser origin allowed to call it (repeatable; default Temporal Web's "
        "http://localhost:8233)",
    ),
    arg(
        "--no-token",
        action="store_true",
        help="accept requests without a bearer token (loopback only; for the local Temporal "
        "Web, which cannot send one)",
    ),
    arg("--new-key", metavar="ID", help="print a fresh ID:BASE64KEY for the key variable and exit"),
    JSON,
)
def codec_server(args: argparse.Namespace) -> int:
    def body() -> int:
        import secrets

        from turnclient.runtime.config import load_config
        from turnclient.runtime.extras import install_hint

        try:
            from turnclient.runtime.codec import (
                EncryptionCodec,
                PayloadKeyError,
                PayloadKeys,
                new_key_spec,
            )
            from turnclient.servers.codec_server import DEFAULT_ORIGINS, CodecServer
        except ImportError:
            raise Failure(f"the codec needs cryptography: {install_hint('encryption')}") from None
        if args.new_key:
            try:
                spec = new_key_spec(args.new_key)
            except PayloadKeyError as exc:
                raise Failure(str(exc), EXIT_USAGE) from None
            emit_json({"key": spec}) if args.json else print(spec)
            return EXIT_OK
        cfg = load_config(current_work_dir())
        if cfg.payload_key_env is None:
            raise Failure(
                "turns.toml sets no [temporal] payload_key_env: payloads are not encrypted"
            )
        try:
            keys = PayloadKeys.from_env(cfg.payload_key_env)
        except PayloadKeyError as exc:
            raise Failure(str(exc)) from None
        loopback = args.host in ("127.0.0.1", "::1", "localhost")
        if args.no_token and not loopback:
            raise Failure("--no-token is allowed only on a loopback --host", EXIT_USAGE)
        token = (
            None
            if args.no_token
            else os.environ.get("TURNS_CODEC_TOKEN") or secrets.token_urlsafe(24)
        )
        try:
            server = CodecServer(
                EncryptionCodec(keys),
                host=args.host,
                port=args.port,
                token=token,
                origins=args.origin or DEFAULT_ORIGINS,
            )
        except OSError as exc:
            raise Failure(f"cannot listen on {args.host}:{args.port}: {exc}") from None
        info = {
            "url": server.url,
            "keyIds": list(keys.ids),
            "origins": sorted(server.origins),
            "token": token if token and not os.environ.get("TURNS_CODEC_TOKEN") else None,
            "tokenRequired": token is not None,
        }
        if args.json:
            emit_json(info)
        else:
            print(f"codec server  {server.url} (/encode, /decode) · keys {', '.join(keys.ids)}")
            print(f"origins       {', '.join(sorted(server.origins))}")
            if token is None:
                print("token         none (--no-token)")
            elif info["token"]:
                print(f"token         {token}  (set TURNS_CODEC_TOKEN to choose it)")
            else:
                print("token         from $TURNS_CODEC_TOKEN")
            print("Ctrl-C to stop.", flush=True)
        sys.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        return EXIT_OK

    return run_sync(args, body)
