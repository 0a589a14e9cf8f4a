"""Tools: one declaration per tool, and the registry that runs them (spec §6.5, §10.1).

A tool is a plain typed Python function, sync or async (or a callable
object, or a ``functools.partial``), turned into a ``Tool`` by the ``tool``
decorator (or ``tool(fn, ...)`` as a call). The function's signature is the
tool's input: each parameter becomes a property of a pydantic model whose
JSON schema the model sees (under the parameter's own name, whatever it is);
the docstring's text before its first section is the description and its
``Args:`` (Google), ``:param x:`` (Sphinx) or ``Parameters`` (NumPy) entries
describe the parameters. A parameter annotated ``ToolContext`` (or
``ToolContext | None``) is not part of the input; it receives the turn id,
the call id, a cancellation event and a progress callback. A parameter
pydantic cannot validate or describe is a ``ToolDeclarationError`` naming it.

When the model calls the tool, its arguments are validated against that
model (strictly, as JSON: ``"6"`` is not an ``int``) before the function
runs; invalid arguments become an error result that quotes pydantic's
messages, so the model can correct itself (§21.2). An exception raised by the
function becomes an error result too, and is logged with its traceback where
the tool ran (the worker); a ``ToolError`` is an expected problem and is
reported without a traceback. The return value may be any JSON value, a
pydantic model, a dataclass, or a ``ToolResultData`` for full control.

Everything the runtime needs about a tool is on the ``Tool``: its stable id,
name, description, schema, execution mode (``"sync"`` runs here;
``"async"`` is completed later by an external input and has no body),
permission (``"none"`` or ``"ask"``), ``requires_human``, and ``fast``
(a sync tool that finishes within ``fast_timeout`` seconds and runs as a
Temporal local activity; see ``docs/architecture.md``). The wire snapshot in
``turn_created`` is ``Tool.descriptor()`` (``fast`` is how this runtime runs
the tool, not part of the spec's descriptor); the registry maps snapshotted
ids back to live tools when a turn advances.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import re
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticSerializationError, core_schema, to_jsonable_python

from .errors import DependencyError
from .events import ToolDescriptor, ToolResultData
from .jsonvalue import JsonValue, json_problem
from .subagents import SPAWN_AGENT_TOOL_ID, WORKFLOW_TOOL_PREFIX

if TYPE_CHECKING:
    import asyncio  # imported where a tool runs: declaring tools (reading turns.toml) never needs it

log = logging.getLogger("turncore.tools")

ReportProgress = Callable[[JsonValue], Awaitable[None]]
Execution = Literal["sync", "async"]
Permission = Literal["none", "ask"]
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_FAST_TIMEOUT = 10.0
"""Seconds a fast tool may run unless it declares otherwise."""
MAX_FAST_TIMEOUT = 30.0
"""The longest bound a fast tool may declare. A local activity holds its workflow
task while it runs; anything longer belongs in a plain (heartbeating) activity."""


def fast_problem(fast: bool, execution: str, timeout: float) -> str | None:
    """Why this fast declaration is refused, or None when it is sound."""
    if not fast:
        return None
    if execution != "sync":
        return "fast applies to sync tools only (an async tool's result arrives later as an input)"
    if not timeout > 0 or timeout > MAX_FAST_TIMEOUT:  # not > 0 also refuses NaN
        return f"fast_timeout must be more than 0 and at most {MAX_FAST_TIMEOUT:g} seconds, not {timeout:g}"
    return None


@dataclass(frozen=True)
class ToolContext:
    """What a running sync tool may use: its identity, a cancellation signal and
    a progress callback that returns only once the progress is durable (§10.4)."""

    turn_id: str
    tool_call_id: str
    cancelled: asyncio.Event
    report_progress: ReportProgress


class ToolError(Exception):
    """An expected problem the model should read as an error result (no traceback is logged)."""


class ToolDeclarationError(DependencyError):
    """A function cannot be a tool as declared (bad name, untypeable parameter, schema mismatch)."""


class SyncTool(Protocol):
    """What the registry runs: the port a sync tool implements."""

    async def execute(self, input: JsonValue, context: ToolContext) -> ToolResultData: ...


# ---------------------------------------------------------------- schema from a signature


class _NoTitles(GenerateJsonSchema):
    """Schemas without pydantic's generated titles: they repeat the names and cost tokens."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: core_schema.CoreSchema, mode: Any = "validation") -> JsonSchemaValue:
        out = super().generate(schema, mode)
        out.pop("title", None)
        return out

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        out = super().model_schema(schema)
        out.pop("title", None)  # nested models too (their $defs keep the class name as key)
        return out


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_OTHER_HEADER = re.compile(
    r"^(Returns?|Raises|Yields?|Examples?|Notes?|Attributes|See Also)\s*:\s*$"
)
_GOOGLE_ARG = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^:param\s+(?:[^:\s]+\s+)?(\w+)\s*:\s*(.*)$")
_NUMPY_ARGS = {"Parameters", "Params", "Arguments", "Args", "Other Parameters"}
_NUMPY_UNDERLINE = re.compile(r"^-{3,}\s*$")
_NUMPY_ARG = re.compile(r"^\*{0,2}(\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (the text before any section) and per-parameter descriptions.

    Google style (an ``Args:`` section of ``name: text`` lines, continuations
    indented deeper), Sphinx style (``:param name: text``) and NumPy style (a
    ``Parameters`` header underlined with dashes, ``name : type`` lines, the
    text indented below) are understood.
    """
    if not doc:
        return "", {}
    description: list[str] = []
    params: dict[str, str] = {}
    section = "description"
    current: list[str] = []
    arg_indent: int | None = None
    lines = inspect.cleandoc(doc).splitlines()

    def add(text: str) -> None:
        for name in current:
            params[name] = f"{params[name]} {text}".strip()

    for i, line in enumerate(lines):
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if indent == 0 and _NUMPY_UNDERLINE.match(text) and i > 0:
            continue  # the underline of a NumPy header, handled with the header
        underlined = i + 1 < len(lines) and _NUMPY_UNDERLINE.match(lines[i + 1].strip())
        if indent == 0 and text and underlined:
            section, current = ("numpy" if text in _NUMPY_ARGS else "other"), []
            continue
        if indent == 0 and _ARGS_HEADER.match(text):
            section, current, arg_indent = "args", [], None
            continue
        if indent == 0 and (
            _OTHER_HEADER.match(text) or (text.startswith(":") and not _SPHINX_ARG.match(text))
        ):
            section, current = "other", []
            continue
        sphinx = _SPHINX_ARG.match(text) if indent == 0 else None
        if sphinx:
            section, current = "sphinx", [sphinx.group(1)]
            params[sphinx.group(1)] = sphinx.group(2).strip()
            continue
        if section == "description":
            description.append(line)
        elif section == "args" and text:
            google = _GOOGLE_ARG.match(text)
            if google and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = [google.group(1)]
                params[google.group(1)] = google.group(2).strip()
            else:
                add(text)
        elif section == "numpy" and text:
            numpy = _NUMPY_ARG.match(text) if indent == 0 else None
            if numpy:
                current = [n.strip().lstrip("*") for n in numpy.group(1).split(",")]
                for name in current:
                    params[name] = ""
            else:
                add(text)
        elif section == "sphinx" and text and indent > 0:
            add(text)
    return "\n".join(description).strip(), {k: v for k, v in params.items() if v}


class _Annotated:
    """Something ``typing.get_type_hints`` reads annotations from."""

    def __init__(self, annotations: dict[str, Any]) -> None:
        self.__annotations__ = annotations


def _is_context(annotation: Any) -> bool:
    """``ToolContext``, also as ``ToolContext | None`` or ``Annotated[ToolContext, ...]``."""
    if annotation is ToolContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context(typing.get_args(annotation)[0])
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(options) == 1 and _is_context(options[0])
    return False


@dataclass(frozen=True)
class _Signature:
    model: type[BaseModel]
    params: tuple[str, ...]
    """The parameter each of the model's fields (``p0``, ``p1``, ...) is passed as."""
    context_param: str | None
    positional: tuple[str, ...]
    """Parameters passed by position (positional-only ones)."""
    is_async: bool


def _described(fn: Callable[..., Any]) -> Any:
    """The function whose annotations describe ``fn``'s parameters: a partial's
    function, a callable object's ``__call__``, else ``fn`` itself."""
    if isinstance(fn, functools.partial):
        return _described(fn.func)
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isclass(fn):
        return fn
    return getattr(type(fn), "__call__", fn)  # noqa: B004 - a callable object


def _declared_alias(annotation: Any) -> str | None:
    """The alias an ``Annotated[..., Field(alias=...)]`` gives the argument, if any."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return None
    for meta in typing.get_args(annotation)[1:]:
        if isinstance(meta, FieldInfo) and isinstance(meta.alias, str):
            return meta.alias
    return None


def _doc_of(fn: Callable[..., Any]) -> str | None:
    """The docstring that describes the tool: a partial's function's, a callable object's
    class's (or else its ``__call__``'s), never ``functools.partial``'s own."""
    if isinstance(fn, functools.partial):
        return _doc_of(fn.func)
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isclass(fn):
        return inspect.getdoc(fn)
    own = type(fn).__doc__ or getattr(_described(fn), "__doc__", None)  # not object's
    return inspect.cleandoc(own) if own else None


def _signature_of(fn: Callable[..., Any], name: str, docs: Mapping[str, str]) -> _Signature:
    described = _described(fn)
    try:
        # Only the parameters matter; the return annotation may name anything.
        annotations = getattr(described, "__annotations__", {})
        params_only = {k: v for k, v in annotations.items() if k != "return"}
        hints = typing.get_type_hints(
            _Annotated(params_only),
            globalns=getattr(described, "__globals__", None),
            localns=(
                inspect.getclosurevars(described).nonlocals
                if inspect.isfunction(described)
                else None
            ),
            include_extras=True,
        )
    except Exception as exc:  # an annotation that does not resolve
        raise ToolDeclarationError(
            f"tool {name!r}: cannot resolve the annotations of {_where(fn)}: {exc}"
        ) from None
    fields: dict[str, Any] = {}
    params: list[str] = []
    context_param: str | None = None
    positional: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        annotation = hints.get(p.name, Any)
        if _is_context(annotation):
            if context_param is not None:
                raise ToolDeclarationError(f"tool {name!r}: two ToolContext parameters")
            context_param = p.name
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ToolDeclarationError(
                f"tool {name!r}: *{p.name} cannot be described to a model; "
                "declare each argument as a typed parameter"
            )
        if p.name not in hints:
            raise ToolDeclarationError(
                f"tool {name!r}: parameter {p.name!r} of {_where(fn)} has no type annotation"
            )
        if p.kind is p.POSITIONAL_ONLY:
            positional.append(p.name)
        default = ... if p.default is p.empty else p.default
        description = docs.get(p.name)
        # Fields are p0, p1, ... aliased to the parameter names, so a name pydantic
        # keeps for itself (model_config, json, _private) still names an argument.
        info: dict[str, Any] = {"alias": _declared_alias(annotation) or p.name}
        if description:
            info["description"] = description
        fields[f"p{len(params)}"] = (annotation, Field(default, **info))
        params.append(p.name)
    try:
        model = create_model(
            f"{name}_input",
            __config__=ConfigDict(extra="forbid", strict=True),
            **fields,
        )
        model.model_json_schema(schema_generator=_NoTitles)
    except Exception as exc:  # a type pydantic cannot validate, or not describe as JSON
        raise ToolDeclarationError(
            f"tool {name!r}: {_unschemable(exc, fields, params)} of {_where(fn)} cannot be "
            f"described to a model as JSON: {str(exc).splitlines()[0]}"
        ) from None
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )
    return _Signature(model, tuple(params), context_param, tuple(positional), is_async)


def _unschemable(exc: Exception, fields: Mapping[str, Any], params: Sequence[str]) -> str:
    """The parameter a model-building error is about, found by trying each one alone."""
    for field_name, param in zip(fields, params, strict=True):
        try:
            alone = create_model("probe", **{field_name: fields[field_name]})
            alone.model_json_schema(schema_generator=_NoTitles)
        except Exception:
            return f"parameter {param!r}"
    return "a parameter"


def _where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    qualname = getattr(fn, "__qualname__", repr(fn))
    if code is None:
        return qualname
    return f"{qualname} ({code.co_filename}:{code.co_firstlineno})"


def _validation_message(name: str, exc: ValidationError) -> str:
    """Pydantic's messages, one per problem, each naming the argument."""
    problems = []
    for e in exc.errors(include_url=False):
        where = ".".join(str(part) for part in e["loc"]) or "input"
        problems.append(f"{where}: {e['msg']}")
    count = len(problems)
    return (
        f"Invalid arguments for tool {name} ({count} problem{'s' if count > 1 else ''}): "
        + "; ".join(problems)
    )


# ---------------------------------------------------------------- the Tool


@dataclass(frozen=True)
class Tool:
    """One tool: its declaration, and for a sync tool its implementation.

    Build one with ``tool`` (from a typed function) or ``Tool.external``
    (an async tool described by a schema alone). ``with_`` changes the
    declaration (description, permission, ...) and keeps the function.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    execution: Execution = "sync"
    permission: Permission = "ask"
    """``"ask"`` (the default, failing closed) needs a decision before the call runs."""
    requires_human: bool = False
    tool_id: str = ""
    """The stable registry identity snapshotted in each turn (§6.3); derived when empty."""
    fast: bool = False
    """A sync tool that finishes within ``fast_timeout``: it runs as a local activity."""
    fast_timeout: float = DEFAULT_FAST_TIMEOUT
    """Seconds a fast tool may run; past it the call gets an error result and is not run again."""
    function: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    _signature: _Signature | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not TOOL_NAME.fullmatch(self.name):
            raise ToolDeclarationError(
                f"tool {self.name!r}: a tool name is 1-64 letters, digits, '_' or '-'"
            )
        if not self.tool_id:
            prefix = "user" if self.execution == "sync" else "external"
            object.__setattr__(self, "tool_id", f"{prefix}:{self.name}")
        if self.execution == "sync" and self.function is None:
            raise ToolDeclarationError(f"tool {self.name!r}: a sync tool needs a function")
        problem = fast_problem(self.fast, self.execution, self.fast_timeout)
        if problem is not None:
            raise ToolDeclarationError(f"tool {self.name!r}: {problem}")

    # ------------------------------------------------------------ building

    @classmethod
    def external(
        cls,
        name: str,
        *,
        description: str = "",
        input_schema: dict[str, Any] | None = None,
        permission: Permission = "ask",
        requires_human: bool = False,
        tool_id: str = "",
    ) -> Tool:
        """An async tool described by a JSON schema: its result arrives later as an input."""
        return cls(
            name=name,
            description=description,
            input_schema=input_schema if input_schema is not None else {"type": "object"},
            execution="async",
            permission=permission,
            requires_human=requires_human,
            tool_id=tool_id,
        )

    def with_(self, **changes: Any) -> Tool:
        """The same tool with other declaration fields (the function is kept)."""
        return dataclasses.replace(self, **changes)

    def descriptor(self) -> ToolDescriptor:
        """The snapshot written into ``turn_created``."""
        return ToolDescriptor(
            tool_id=self.tool_id,
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            execution=self.execution,
            requires_human=self.requires_human,
        )

    # ------------------------------------------------------------ running

    async def execute(self, input: JsonValue, context: ToolContext) -> ToolResultData:
        """Validate the arguments, run the function, and make its outcome a result (§21.2)."""
        import asyncio

        sig, fn = self._signature, self.function
        if sig is None or fn is None:
            return ToolResultData(output=f"Tool {self.name} has no implementation", is_error=True)
        try:
            # Validated as JSON, strictly: what the model sent is JSON, and a
            # string is never quietly turned into a number.
            args = sig.model.model_validate_json(orjson.dumps(input), strict=True)
        except ValidationError as exc:
            return ToolResultData(output=_validation_message(self.name, exc), is_error=True)
        except orjson.JSONEncodeError as exc:
            return ToolResultData(
                output=f"Invalid arguments for tool {self.name}: {exc}", is_error=True
            )
        values = {param: getattr(args, f"p{i}") for i, param in enumerate(sig.params)}
        positional = [values.pop(k) for k in sig.positional]
        if sig.context_param is not None:
            values[sig.context_param] = context
        try:
            if sig.is_async:
                value = await fn(*positional, **values)
            else:
                value = await _on_own_thread(self.name, fn, positional, values)
        except asyncio.CancelledError:
            raise
        except ToolError as exc:
            return ToolResultData(output=_message(exc).strip(), is_error=True)
        except (Exception, SystemExit) as exc:
            # SystemExit too (sys.exit(), argparse, click in a tool): raised out of
            # here it would unwind the worker's event loop, not end one call.
            # The model gets the message; whoever runs the worker gets file:line.
            log.exception(
                "tool %s (call %s of turn %s) raised %s",
                self.name,
                context.tool_call_id,
                context.turn_id,
                type(exc).__name__,
            )
            return ToolResultData(
                output=f"Tool raised {type(exc).__name__}{_message(exc, ': ')}", is_error=True
            )
        return _as_result(value)


async def _on_own_thread(
    name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    """``fn(*args, **kwargs)`` on a new daemon thread, awaited from the loop.

    Not ``asyncio.to_thread``: the loop's default executor has only
    ``min(32, cpus + 4)`` threads, and the runtime's own file reads and appends
    run there too. Tools that block (slow I/O, a hung socket) would hold every
    one of them, so further tools, their results and the embedding app's own
    ``to_thread`` work would wait behind them. A daemon thread also never keeps
    the process from exiting when a tool ignores cancellation and hangs.
    """
    import asyncio
    import contextvars
    import threading

    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # the tool's spans nest under the caller's

    def settle(value: Any, exc: BaseException | None) -> None:
        if done.done():  # the awaiting call was cancelled meanwhile
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(value)

    def work() -> None:
        try:
            value, exc = context.run(fn, *args, **kwargs), None
        except BaseException as raised:  # handed to the awaiting call, which decides
            value, exc = None, raised
        with contextlib.suppress(RuntimeError):  # the loop closed while the tool ran
            loop.call_soon_threadsafe(settle, value, exc)

    threading.Thread(target=work, name=f"tool {name}", daemon=True).start()
    return await done


def _message(exc: BaseException, prefix: str = "") -> str:
    """``str(exc)`` (after ``prefix``), or a note when the exception cannot say it."""
    try:
        return f"{prefix}{exc}"
    except Exception:
        return " (its message cannot be printed)"


def _as_result(value: Any) -> ToolResultData:
    if isinstance(value, ToolResultData):
        return value
    try:
        output = to_jsonable_python(value, by_alias=True)
    except (PydanticSerializationError, ValueError) as exc:  # ValueError: bytes that are no UTF-8
        return ToolResultData(output=f"Tool returned a non-JSON value: {exc}", is_error=True)
    problem = json_problem(output, "output")
    if problem is not None:
        return ToolResultData(output=f"Tool returned a non-JSON value: {problem}", is_error=True)
    return ToolResultData(output=output, is_error=False)


@typing.overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission = "ask",
    execution: Execution = "sync",
    requires_human: bool = False,
    tool_id: str = "",
    fast: bool = False,
    fast_timeout: float = DEFAULT_FAST_TIMEOUT,
) -> Tool: ...


@typing.overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission = "ask",
    execution: Execution = "sync",
    requires_human: bool = False,
    tool_id: str = "",
    fast: bool = False,
    fast_timeout: float = DEFAULT_FAST_TIMEOUT,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: Permission = "ask",
    execution: Execution = "sync",
    requires_human: bool = False,
    tool_id: str = "",
    fast: bool = False,
    fast_timeout: float = DEFAULT_FAST_TIMEOUT,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool from a typed function: ``@tool``, ``@tool(permission="none")`` or ``tool(fn)``.

    ``execution="async"`` declares a tool whose result arrives later (``turns
    complete``, ``Turns.complete``); the function then only describes the
    input and never runs. ``fast=True`` declares a sync tool that finishes
    within ``fast_timeout`` seconds (10 by default, at most 30): it runs as a
    Temporal local activity, with every guarantee of a sync tool kept.
    """

    def build(f: Callable[..., Any]) -> Tool:
        tool_name = name or str(getattr(f, "__name__", ""))
        summary, docs = _parse_docstring(_doc_of(f))
        sig = _signature_of(f, tool_name, docs)
        schema = sig.model.model_json_schema(schema_generator=_NoTitles)
        return Tool(
            name=tool_name,
            description=description if description is not None else summary,
            input_schema=schema,
            execution=execution,
            permission=permission,
            requires_human=requires_human,
            tool_id=tool_id,
            fast=fast,
            fast_timeout=fast_timeout,
            function=f if execution == "sync" else None,
            _signature=sig if execution == "sync" else None,
        )

    return build(fn) if fn is not None else build


def schema_disagreement(declared: Any, inferred: Any, where: str = "input_schema") -> str | None:
    """Where a hand-written schema disagrees with the inferred one, or None.

    The declared schema may say less (omit descriptions) but not differently:
    every key it gives must equal the inferred value at the same place.
    """
    if isinstance(declared, dict) and isinstance(inferred, dict):
        for key, value in declared.items():
            if key not in inferred:
                if key in ("description", "title", "examples"):
                    continue
                return f"{where}.{key} is not in the schema inferred from the function"
            problem = schema_disagreement(value, inferred[key], f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    if isinstance(declared, list) and isinstance(inferred, list):
        if sorted(map(repr, declared)) != sorted(map(repr, inferred)):
            return f"{where} is {declared!r} but the function gives {inferred!r}"
        return None
    if declared != inferred:
        return f"{where} is {declared!r} but the function gives {inferred!r}"
    return None


# ---------------------------------------------------------------- the registry


class ToolRegistry:
    """Maps stable ``toolId`` values to live sync implementations.

    Async tools need no implementation, only a matching declaration: a
    descriptor whose ``toolId`` is unknown here, or whose execution mode
    differs from what is registered, is a dependency mismatch (§15.3).
    """

    def __init__(
        self,
        sync_tools: Mapping[str, SyncTool] | None = None,
        async_tools: frozenset[str] | set[str] = frozenset(),
        families: Mapping[str, Callable[[ToolDescriptor], SyncTool]] | None = None,
        fast: Mapping[str, float] | None = None,
    ) -> None:
        self._sync = dict(sync_tools or {})
        self._async = frozenset(async_tools)
        self._fast = dict(fast or {})
        """Fast bounds by tool id for implementations that are not ``Tool``s."""
        self._families = dict(families or {})
        """``toolId`` prefix (``mcp:``) to the factory that runs such a snapshotted
        tool here, or raises ``DependencyError`` saying why it cannot."""

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> ToolRegistry:
        listed = list(tools)
        return cls(
            {t.tool_id: t for t in listed if t.execution == "sync"},
            {t.tool_id for t in listed if t.execution == "async"},
        )

    def fast_tools(self, tool_ids: Iterable[str] | None = None) -> dict[str, float]:
        """The fast tools registered here (of ``tool_ids`` when given), with their bounds."""
        wanted = None if tool_ids is None else set(tool_ids)
        out: dict[str, float] = {}
        for tid, t in self._sync.items():
            if wanted is not None and tid not in wanted:
                continue
            if isinstance(t, Tool) and t.fast:
                out[tid] = t.fast_timeout
            elif tid in self._fast:
                out[tid] = self._fast[tid]
        return out

    def register(self, tool_id: str, tool: SyncTool) -> None:
        self._sync[tool_id] = tool

    def register_family(self, prefix: str, factory: Callable[[ToolDescriptor], SyncTool]) -> None:
        self._families[prefix] = factory

    def _family(self, tool_id: str) -> Callable[[ToolDescriptor], SyncTool] | None:
        return next((f for p, f in self._families.items() if tool_id.startswith(p)), None)

    def sync_tool(self, descriptor: ToolDescriptor) -> SyncTool:
        family = self._family(descriptor.tool_id)
        if family is not None and descriptor.execution == "sync":
            return family(descriptor)
        self.check(descriptor)
        return self._sync[descriptor.tool_id]

    def check(self, descriptor: ToolDescriptor) -> None:
        """Raise ``DependencyError`` unless the descriptor can run here as snapshotted."""
        tid = descriptor.tool_id
        if tid.startswith(WORKFLOW_TOOL_PREFIX):
            if tid != SPAWN_AGENT_TOOL_ID:
                raise DependencyError(f"no workflow-native tool {tid!r} exists in this runtime")
            return  # implemented by the turn workflow itself
        family = self._family(tid)
        if family is not None:
            if descriptor.execution != "sync":
                raise DependencyError(f"tool {tid!r} is snapshotted as async; it runs as sync here")
            family(descriptor)  # raises when this runtime cannot run it
            return
        if descriptor.execution == "sync":
            if tid not in self._sync:
                hint = " (it is registered as async)" if tid in self._async else ""
                raise DependencyError(
                    f"no sync implementation is registered for tool {tid!r}{hint}"
                )
        elif tid not in self._async:
            hint = " (it is registered as sync)" if tid in self._sync else ""
            raise DependencyError(f"async tool {tid!r} is not declared in this runtime{hint}")

    def check_all(self, descriptors: list[ToolDescriptor]) -> None:
        for d in descriptors:
            self.check(d)


__all__ = [
    "ReportProgress",
    "SyncTool",
    "Tool",
    "ToolContext",
    "ToolDeclarationError",
    "ToolError",
    "ToolRegistry",
    "schema_disagreement",
    "tool",
]
