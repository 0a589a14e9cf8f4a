"""Temporal activities of turncore: they act, the workflow decides.

The package's top level is the contract the workflow imports inside the
sandbox: the activities' typed signatures, their payloads and the mapping of
errors to ``ApplicationError``. None of it does I/O. The implementation,
with its dependencies (httpx, model adapters, the file repository), is
``turncore_temporal.activities.turn_activities``; only the worker and the
runtime import it.
"""

from .contract import ACTIVITY_NAMES, DATA_CONVERTER, TurnActivityContract

__all__ = ["ACTIVITY_NAMES", "DATA_CONVERTER", "TurnActivityContract"]
