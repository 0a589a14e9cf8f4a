"""The one timestamp format of durable events: UTC, milliseconds, ``Z`` (spec §4)."""

from __future__ import annotations

from datetime import datetime


def format_ts(when: datetime) -> str:
    """``when`` (an aware UTC datetime) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``.

    The caller owns the clock: the workflow passes ``workflow.now()``, the
    activities and the client the wall clock.
    """
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
