"""``turns ui``: the approval and live-view web UI, its JSON API and SSE, in one process.

Kept apart from ``turnclient.cli`` (which imports this module to register
the command): the web stack (Starlette, uvicorn) is imported only when the
command runs, and it is an optional extra — ``pip install 'turncore[ui]'``.
``dev_web_ui`` is what ``turns dev`` serves next to Temporal Web.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from .cli import EXIT_OK, EXIT_USAGE, JSON, NO_WORKER, Failure, _emit_json, _run_async, arg, command

if TYPE_CHECKING:
    import asyncio

    from temporalio.client import Client

    from .runtime import Runtime

MISSING = "the web UI needs its extra: pip install 'turncore[ui]' (starlette, uvicorn)"


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
            from .ui import (
                UiConfigError,
                check_token,
                create_app,
                load_tokens,
                token_from,
                web_ui,
            )
        except ImportError:
            raise Failure(MISSING) from None
        from turncore_temporal.worker import serving

        from .runtime import Runtime, temporal

        try:
            tokens = load_tokens(args.tokens_file)
            token = check_token(args.host, token_from(args.token), tokens_file=tokens is not None)
        except UiConfigError as exc:
            raise Failure(str(exc), EXIT_USAGE) from None
        runtime = Runtime.from_work_dir()
        async with temporal(runtime.work_dir) as conn, contextlib.AsyncExitStack() as stack:
            if not args.no_worker:
                await stack.enter_async_context(serving(runtime, conn.client))
            app = create_app(runtime, conn.client, token=token, tokens=tokens)
            async with web_ui(app, args.host, args.port) as web:
                opened = f"{web.url}/?token={token}" if token else f"{web.url}/"
                if args.json:
                    _emit_json(
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

    return _run_async(args, body)


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
async def dev_web_ui(runtime: Runtime, client: Client, port: int) -> AsyncIterator[str | None]:
    """The web UI on loopback for ``turns dev`` (a free port if ``port`` is taken); None if
    the extra is not installed."""
    try:
        from .ui import create_app, web_ui
    except ImportError:
        yield None
        return
    app = create_app(runtime, client)
    async with web_ui(app, "127.0.0.1", port, fallback=True) as web:
        yield f"{web.url}/"


__all__ = ["dev_web_ui", "ui"]
