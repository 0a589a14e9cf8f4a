"""One small error tree.

- ``InfrastructureError``: trustworthy turn state cannot be established or
  persisted (corrupt file, repository failure, missing dependency). Never
  recorded as ``turn_failed``; the caller fixes the environment and retries.
- ``InvalidInputError``: the caller asked for something impossible (a
  path-like id, an input for a call that is not pending). Nothing durable
  changes.
- ``TurnFailure``: a modelled failure of the turn itself (provider failure,
  model-call limit). These end up in the file as ``turn_failed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class TurnError(Exception):
    """Base of every error turncore raises on purpose."""


class InfrastructureError(TurnError):
    """Turn state could not be established or persisted; nothing false was written."""


class CorruptTurnError(InfrastructureError):
    """A turn log breaks the file format or a reducer invariant.

    ``line`` is the 1-based line of the first offending event (1 for an empty
    file); ``rule`` names what is broken.
    """

    def __init__(self, rule: str, *, path: str | None = None, line: int | None = None) -> None:
        self.rule = rule
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(f"{where}{rule}")

    def located(self, path: str) -> CorruptTurnError:
        """The same error, naming the file it was found in."""
        return CorruptTurnError(self.rule, path=path, line=self.line)


class TurnNotFoundError(InfrastructureError):
    """No turn file exists for the id."""


class TurnExistsError(InfrastructureError):
    """``create`` found a file already there."""


class AppendConflictError(InfrastructureError):
    """An append's ``known_offset`` is beyond the end of the file: it was truncated or replaced.

    Raised instead of writing, so a stale writer never interleaves its batch
    with someone else's. A retried batch whose exact lines already follow the
    offset is not a conflict; the repository recognises it and writes nothing.
    """


class StuckTurnError(InfrastructureError):
    """The turn's run cannot advance: its workflow task keeps failing.

    ``applied`` says whether the input the caller sent is in the file (it was
    accepted before the run got stuck) or certainly not (it must be sent
    again once the run is fixed); None when no input was sent.
    """

    def __init__(self, message: str, *, turn_id: str, cause: str, applied: bool | None) -> None:
        self.turn_id = turn_id
        self.cause = cause
        self.applied = applied
        super().__init__(message)


class DependencyError(InfrastructureError):
    """A live dependency (model, tool, context, agent) could not be resolved or does not match."""


class InvalidInputError(TurnError, ValueError):
    """The caller's input is invalid; nothing durable changed."""


def invalid_input(what: str, exc: ValidationError) -> InvalidInputError:
    """A caller's arguments that a model refused, as ``InvalidInputError``: ``what`` and
    each problem (``field: message``), not pydantic's multi-line report."""
    problems = []
    for e in exc.errors(include_url=False):
        message = (
            str(e.get("ctx", {}).get("error", e["msg"])) if e["type"] == "value_error" else e["msg"]
        )
        where = ".".join(str(part) for part in e["loc"])
        problems.append(
            message if e["type"] == "value_error" or not where else f"{where}: {message}"
        )
    return InvalidInputError(f"{what}: {'; '.join(problems)}")


class InvalidTurnIdError(InvalidInputError):
    """A turn id that is malformed or path-like."""


class RejectedInputError(InvalidInputError):
    """An external input that targets nothing pending, or arrives after the turn ended."""


class ExpiredDeliveryError(RejectedInputError):
    """The run saw the input only after the sender's deadline: it was not applied.

    Safe to send again (``TurnClient`` does, with a new deadline).
    """


class StagedValueError(RejectedInputError):
    """A staged input's value is missing, or its bytes do not match the reference.

    The input is rejected like any other: nothing is appended and the turn
    goes on. The sender stages the value again and resends the reference.
    """


class InputTooLargeError(InvalidInputError):
    """An input too large to send at all: inline or staged (``MAX_STAGED_BYTES``)."""


class TurnFailure(TurnError):
    """A modelled failure of the turn; ``code`` is the spec's machine-readable discriminator."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class ContextResolutionError(DependencyError):
    """A context reference (or inherited agent snapshot) could not be materialized."""
