"""How a process that used Temporal ends: flush what it owes, then ``os._exit``.

The Temporal SDK's Rust core keeps threads of its own for the life of the
process (the SDK offers no way to stop them). If CPython finalises while
one of them calls back into Python — a forwarded core log line, a finished
RPC — the process aborts with SIGABRT ("Fatal Python error:
PyGILState_Release … Python runtime state: finalizing"), whatever exit code
the command meant to give. So the ``turns`` command and ``worker.py`` never
finalise: once their work is done they flush stdio, logging and any
OpenTelemetry spans still batched, and leave with ``os._exit``. Nothing is
lost by skipping the rest: every fact a turn has is in its file, and the
kernel drops this process's file locks.

A program embedding turncore (``turnclient.Turns``) owns its own exit; the
same applies to it (see docs/api.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def leave(code: int) -> NoReturn:
    """Flush traces, logs and stdio, then end the process with ``code`` at once."""
    # Only a process that set up telemetry has spans to flush; importing it here
    # would load the Temporal SDK into every command that never touched it.
    telemetry = sys.modules.get("turnclient.runtime.telemetry")
    if telemetry is not None:
        with contextlib.suppress(Exception):
            telemetry.shutdown_tracing()
    # Likewise logging: a process that never loaded it has no handler to flush.
    logging = sys.modules.get("logging")
    if logging is not None:
        with contextlib.suppress(Exception):
            logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


__all__ = ["leave"]
