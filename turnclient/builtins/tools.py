"""The built-in tools: clock, calculator, read_file, list_dir, write_file, http_get, ask_human.

Each is a typed tool (``turncore.tools.tool``): its schema comes from its
signature, its arguments are validated before it runs. ``ask_human`` is
async: it has no body, a human answers it with ``turns complete``. File tools
are confined to one directory, the workspace: a path that leads outside it
through ``..`` or an absolute path is refused with an error result, and
symbolic links are never followed at all. Every component is opened relative
to its directory with ``O_NOFOLLOW``, so a link swapped in while a tool runs
(a race against a concurrent writer) fails the call instead of leading
elsewhere.

A tool's problem (a refused path, an unreachable URL) is a ``ToolError``:
an error *result* the model can read and correct (§21.2), not a bug.
"""

from __future__ import annotations

import ast
import errno
import math
import operator
import os
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from turncore.tools import Tool, ToolError, tool

if TYPE_CHECKING:
    import httpx  # loaded by http_get_tool: reading a config never needs it

MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 500
MAX_HTTP_BYTES = 64 * 1024
HTTP_TIMEOUT = 15.0

ToolProblem = ToolError
"""The name the built-ins have always raised; an error result, not a bug."""

BUILTIN_NAMES = (
    "clock",
    "calculator",
    "read_file",
    "list_dir",
    "write_file",
    "http_get",
    "ask_human",
)

WorkspacePath = Annotated[str, Field(description="A path relative to the workspace.")]


def _builtin(t: Tool) -> Tool:
    return t.with_(tool_id=f"builtin:{t.name}")


# ---------------------------------------------------------------- clock


def clock_tool(now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Tool:
    @tool(permission="none", fast=True)
    def clock(
        time_zone: Annotated[
            str, Field(alias="timeZone", description="An IANA time zone name.")
        ] = "UTC",
    ) -> dict[str, str]:
        """The current date and time in an IANA time zone such as America/Chicago (UTC when no zone is given)."""
        try:
            zone = ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolError(
                f"unknown time zone {time_zone!r}; use an IANA name such as America/Chicago"
            ) from None
        local = now().astimezone(zone)
        hour = local.hour % 12 or 12
        return {
            "timeZone": time_zone,
            "iso": local.isoformat(timespec="seconds"),
            "display": f"{hour}:{local:%M} {local:%p} on {local:%A}, {local.day} {local:%B %Y}",
            "abbreviation": local.tzname() or "",
            "utcOffset": local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:],
        }

    return _builtin(clock)


# ---------------------------------------------------------------- calculator

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPRESSION = 500
MAX_MAGNITUDE = 10**100


def evaluate(expression: str) -> int | float:
    """Evaluate arithmetic safely: only numbers, operators and the listed functions."""
    if len(expression) > MAX_EXPRESSION:
        raise ToolProblem(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise ToolProblem(f"{expression!r} is not an arithmetic expression") from None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.Name) and node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 1000 or abs(left) > 10**9):
                raise ToolProblem("the power is too large")
            return _check(_BINARY[type(node.op)](left, right))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and not node.keywords
            and 1 <= len(node.args) <= 2
        ):
            return _check(_FUNCTIONS[node.func.id](*(ev(a) for a in node.args)))
        raise ToolProblem(f"{ast.unparse(node)!r} is not allowed in an arithmetic expression")

    try:
        result = ev(tree)
    except ZeroDivisionError:
        raise ToolProblem("division by zero") from None
    except (ValueError, OverflowError, TypeError) as exc:
        raise ToolProblem(f"cannot evaluate {expression!r}: {exc}") from None
    return result  # type: ignore[no-any-return]


def _check(value: Any) -> Any:
    if isinstance(value, complex):
        raise ToolProblem("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolProblem("the result is not a finite number")
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        raise ToolProblem("the result is too large")
    return value


def calculator_tool() -> Tool:
    @tool(permission="none", fast=True)
    def calculator(expression: str) -> dict[str, Any]:
        """Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses, pi, e, and sqrt, exp, log, log10, sin, cos, tan, abs, round, floor, ceil."""
        return {"expression": expression, "result": evaluate(expression)}

    return _builtin(calculator)


# ---------------------------------------------------------------- files


def confine(root: Path, given: Any) -> Path:
    """``given`` as a path inside ``root``, normalised without touching the disk.

    ``..`` is resolved by name; a path that leaves the workspace that way, or
    an absolute path elsewhere, is a ToolProblem. Symlinks are not looked at
    here: the tools open every component with ``O_NOFOLLOW`` (``_open_in``),
    so a link is refused when it is met, even one swapped in after this check.
    """
    if not isinstance(given, str) or not given.strip():
        raise ToolProblem("'path' must be a non-empty string")
    if "\0" in given:
        raise ToolProblem("'path' must not contain NUL")
    base = root.resolve()
    candidate = Path(given)
    full = Path(os.path.normpath(candidate if candidate.is_absolute() else base / candidate))
    if full != base and base not in full.parents:
        raise ToolProblem(f"{given!r} is outside the workspace; only paths inside it are allowed")
    return full


def _relative(root: Path, path: Path) -> str:
    rel = path.relative_to(root.resolve())
    return str(rel) if str(rel) != "." else "."


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _link_problem(root: Path, path: Path) -> ToolProblem:
    return ToolProblem(
        f"{_relative(root, path)} is a symbolic link; links are never followed "
        "(one could lead outside the workspace)"
    )


def _open_in(
    root: Path, path: Path, flags: int, *, mode: int = 0o644, make_parents: bool = False
) -> int:
    """Open ``path`` (from ``confine``) one component at a time, following no symlink.

    Each directory is opened relative to the one before with ``O_NOFOLLOW``,
    so a component that is (or becomes, while we walk) a symlink fails
    instead of leading out of the workspace. The final component is opened
    with ``flags | O_NOFOLLOW`` and the caller checks what it got with
    ``fstat``. Returns the descriptor; the caller closes it.
    """
    base = root.resolve()
    parts = path.relative_to(base).parts
    fd = os.open(base, _DIR)
    try:
        walked = base
        for i, part in enumerate(parts):
            walked = walked / part
            last = i == len(parts) - 1
            try:
                if last:
                    new = os.open(part, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
                else:
                    try:
                        new = os.open(part, _DIR, dir_fd=fd)
                    except FileNotFoundError:
                        if not make_parents:
                            raise
                        os.mkdir(part, 0o755, dir_fd=fd)
                        new = os.open(part, _DIR, dir_fd=fd)
            except FileExistsError:
                raise  # O_EXCL: the caller decides
            except OSError as exc:
                if exc.errno == errno.ELOOP or _is_link(part, fd):
                    raise _link_problem(root, walked) from None
                if isinstance(exc, FileNotFoundError):
                    raise ToolProblem(f"{_relative(root, walked)} does not exist") from None
                if exc.errno == errno.ENOTDIR:
                    raise ToolProblem(f"{_relative(root, walked)} is not a directory") from None
                if isinstance(exc, IsADirectoryError):
                    raise ToolProblem(f"{_relative(root, walked)} is a directory") from None
                raise ToolProblem(f"{_relative(root, walked)}: {exc.strerror}") from None
            os.close(fd)
            fd = new
        if not parts:
            # The workspace itself: open it the same way callers expect.
            new = os.open(base, flags | os.O_CLOEXEC)
            os.close(fd)
            fd = new
        return fd
    except BaseException:
        os.close(fd)
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_file_tool(root: Path) -> Tool:
    @tool(permission="none")
    def read_file(path: WorkspacePath) -> dict[str, Any]:
        """Read a text file in the workspace."""
        found = confine(root, path)
        # O_NONBLOCK: a FIFO must not hang the tool; only regular files are read.
        fd = _open_in(root, found, os.O_RDONLY | os.O_NONBLOCK)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ToolProblem(f"{_relative(root, found)} is not a file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
        truncated = len(data) > MAX_READ_BYTES
        data = data[:MAX_READ_BYTES]
        if b"\0" in data:
            raise ToolProblem(f"{_relative(root, found)} is a binary file")
        return {
            "path": _relative(root, found),
            "size": st.st_size,
            "content": data.decode("utf-8", errors="replace"),
            "truncated": truncated,
        }

    return _builtin(read_file)


def list_dir_tool(root: Path) -> Tool:
    @tool(permission="none")
    def list_dir(path: WorkspacePath = ".") -> dict[str, Any]:
        """List a directory in the workspace ('.' is the workspace itself)."""
        found = confine(root, path)
        try:
            fd = _open_in(root, found, os.O_RDONLY | os.O_DIRECTORY)
        except ToolProblem as problem:
            if "does not exist" in str(problem) or "symbolic link" in str(problem):
                raise
            raise ToolProblem(f"{_relative(root, found)} is not a directory") from None
        try:
            entries: list[dict[str, Any]] = []
            names = sorted(os.listdir(fd))
            for name in names[:MAX_LIST_ENTRIES]:
                # Entries are examined relative to the opened directory, without
                # following links, so a swapped-in link is shown as a link.
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed since listdir: it is no longer there to list
                if stat.S_ISLNK(st.st_mode):
                    kind = "link"
                elif stat.S_ISDIR(st.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(st.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                entry: dict[str, Any] = {"name": name, "type": kind}
                if kind == "file":
                    entry["size"] = st.st_size
                entries.append(entry)
        finally:
            os.close(fd)
        return {
            "path": _relative(root, found),
            "entries": entries,
            "truncated": len(names) > MAX_LIST_ENTRIES,
        }

    return _builtin(list_dir)


def write_file_tool(root: Path) -> Tool:
    @tool(permission="ask")
    def write_file(path: WorkspacePath, content: str, append: bool = False) -> dict[str, Any]:
        """Write (or with append=true, append to) a text file in the workspace. Needs a human's approval."""
        found = confine(root, path)
        if found == root.resolve():
            raise ToolProblem(f"{_relative(root, found)} is a directory")
        # O_NONBLOCK: opening a FIFO for writing fails at once instead of waiting.
        flags = os.O_WRONLY | os.O_NONBLOCK
        try:
            fd = _open_in(root, found, flags | os.O_CREAT | os.O_EXCL, make_parents=True)
            created = True
        except FileExistsError:
            fd = _open_in(root, found, flags | (os.O_APPEND if append else 0))
            created = False
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ToolProblem(f"{_relative(root, found)} is not a regular file")
        os.set_blocking(fd, True)
        if not append:
            os.ftruncate(fd, 0)  # only now that it is known to be a regular file
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode("utf-8"))
        return {
            "path": _relative(root, found),
            "bytes": len(content.encode("utf-8")),
            "created": created,
            "appended": append,
        }

    return _builtin(write_file)


# ---------------------------------------------------------------- http


def http_get_tool(
    client_factory: Callable[[], httpx.AsyncClient] | None = None,
) -> Tool:
    def make_client() -> httpx.AsyncClient:
        import httpx

        if client_factory is not None:
            return client_factory()
        return httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=True, max_redirects=5)

    @tool(permission="ask")
    async def http_get(url: str) -> dict[str, Any]:
        """Fetch an http(s) URL and return its status, content type and (text) body. Needs a human's approval."""
        import httpx

        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            raise ToolProblem(f"{url!r} is not a URL") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ToolProblem("only http and https URLs can be fetched")
        try:
            async with make_client() as client, client.stream("GET", url) as response:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_HTTP_BYTES:
                        break
        except httpx.HTTPError as exc:
            raise ToolProblem(f"fetching {url} failed: {type(exc).__name__}") from None
        truncated = len(body) > MAX_HTTP_BYTES
        return {
            "url": str(response.url),
            "status": response.status_code,
            "contentType": response.headers.get("content-type", ""),
            "body": body[:MAX_HTTP_BYTES].decode(response.encoding or "utf-8", errors="replace"),
            "truncated": truncated,
        }

    return _builtin(http_get)


# ---------------------------------------------------------------- ask_human


@tool(execution="async", requires_human=True, permission="none", tool_id="builtin:ask_human")
def ask_human(question: str) -> None:
    """Ask the human a question and wait for the answer."""


def builtin_tools(
    workspace: Path,
    *,
    now: Callable[[], datetime] | None = None,
    http_client: Callable[[], httpx.AsyncClient] | None = None,
) -> dict[str, Tool]:
    """The built-in tools by name, with the file tools over ``workspace``."""
    tools = (
        clock_tool(now) if now is not None else clock_tool(),
        calculator_tool(),
        read_file_tool(workspace),
        list_dir_tool(workspace),
        write_file_tool(workspace),
        http_get_tool(http_client),
        ask_human,
    )
    out = {t.name: t for t in tools}
    assert tuple(out) == BUILTIN_NAMES
    return out


__all__ = [
    "BUILTIN_NAMES",
    "ToolProblem",
    "ask_human",
    "builtin_tools",
    "confine",
    "evaluate",
    "http_get_tool",
]
