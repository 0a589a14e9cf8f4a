"""The built-in demo model, ``scripted/demo``: real tool round trips with no API key.

It is a function-registered scripted model (``ModelRegistry.register_function``).
Call 0 reads the user's request and picks one of the agent's tools with
arguments taken from the request — the clock for "what time is it in
Chicago?", write_file for "save … to notes.txt" (which needs an approval),
ask_human for "ask me …", and so on. Call 1 answers from the tool result it
finds in the request's last tool message, so the answer quotes what the
tool really returned (the real time, the real file listing, a denial).

It keeps no state: everything it needs is in the request, so a re-issued or
recovered call gets the same decision.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from turncore.messages import AssistantMessage, TextPart, ToolMessage, UserMessage

if TYPE_CHECKING:
    from turncore.model import ModelCallRequest

DEMO_MODEL = "demo"

PLACES: dict[str, str] = {
    "chicago": "America/Chicago",
    "new york": "America/New_York",
    "los angeles": "America/Los_Angeles",
    "san francisco": "America/Los_Angeles",
    "denver": "America/Denver",
    "toronto": "America/Toronto",
    "mexico city": "America/Mexico_City",
    "são paulo": "America/Sao_Paulo",
    "sao paulo": "America/Sao_Paulo",
    "london": "Europe/London",
    "paris": "Europe/Paris",
    "berlin": "Europe/Berlin",
    "madrid": "Europe/Madrid",
    "rome": "Europe/Rome",
    "moscow": "Europe/Moscow",
    "dubai": "Asia/Dubai",
    "mumbai": "Asia/Kolkata",
    "delhi": "Asia/Kolkata",
    "singapore": "Asia/Singapore",
    "hong kong": "Asia/Hong_Kong",
    "shanghai": "Asia/Shanghai",
    "beijing": "Asia/Shanghai",
    "tokyo": "Asia/Tokyo",
    "seoul": "Asia/Seoul",
    "sydney": "Australia/Sydney",
    "auckland": "Pacific/Auckland",
    "utc": "UTC",
}

HELP = (
    "I am turncore's built-in demo model: I pick one tool from your request and answer "
    "from its result. Try: “What time is it in Chicago?”, “Calculate 17 * 23”, "
    "“List the files”, “Read notes.txt”, “Save 'hello' to notes.txt” (needs your approval), "
    "“Fetch https://example.com” (needs approval) or “Ask me for my name” (waits for your answer). "
    "For a real model, configure a provider in turns.toml and pass --model."
)

_FILE = re.compile(r"[\w./-]+\.[A-Za-z0-9]{1,8}")
_URL = re.compile(r"https?://\S+")
_QUOTED = re.compile(r"[\"'“‘]([^\"'”’]+)[\"'”’]")
_EXPRESSION = re.compile(r"[-+*/().%^\d\s]*\d[-+*/().%^\d\s]*")


def _text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return " ".join(p.text for p in message.content if isinstance(p, TextPart))


PROMPT_SCAN = 2000
"""The demo reads only the start of a prompt: its patterns backtrack, so scanning a
200 KB prompt whole would take minutes."""


def _last_user(request: ModelCallRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return _text(message)[:PROMPT_SCAN]
    return ""


def _place(prompt: str) -> tuple[str, str]:
    lowered = prompt.lower()
    for name, zone in PLACES.items():
        if name in lowered:
            return name.title() if name != "utc" else "UTC", zone
    named = re.search(r"\b([A-Z][a-z]+/[A-Za-z_]+)\b", prompt)
    if named:
        return named.group(1), named.group(1)
    return "UTC", "UTC"


def plan(prompt: str, tools: set[str]) -> tuple[str, dict[str, Any], str] | None:
    """The tool call for a request: (tool name, input, what to say first), or None."""
    lowered = prompt.lower()
    url = _URL.search(prompt)
    file = _FILE.search(prompt)
    quoted = _QUOTED.search(prompt)
    asking = re.search(r"\bask (me|the human|the user)\b", lowered)
    if "ask_human" in tools and asking:
        return "ask_human", {"question": _question(prompt, asking.end(), quoted)}, "Let me ask you."
    if "http_get" in tools and url:
        return "http_get", {"url": url.group(0).rstrip(".,)")}, "I will fetch that page."
    if "write_file" in tools and re.search(r"\b(write|save|note|store)\b", lowered):
        path = file.group(0) if file else "notes.txt"
        content = quoted.group(1) if quoted else prompt
        return "write_file", {"path": path, "content": content + "\n"}, f"I will write {path}."
    if "read_file" in tools and file and re.search(r"\b(read|show|open|cat)\b", lowered):
        return "read_file", {"path": file.group(0)}, f"Reading {file.group(0)}."
    if "list_dir" in tools and re.search(r"\b(list|files|directory|folder|ls)\b", lowered):
        return "list_dir", {"path": "."}, "Listing the workspace."
    if "clock" in tools and re.search(r"\b(time|clock|date|day)\b", lowered):
        place, zone = _place(prompt)
        return "clock", {"timeZone": zone}, f"Let me check the clock for {place}."
    if "calculator" in tools:
        candidates = [m.group(0).strip() for m in _EXPRESSION.finditer(prompt)]
        expression = max(candidates, key=len, default="")
        if re.search(r"\d\s*[-+*/%^]\s*[\d(]", expression):
            return "calculator", {"expression": expression}, "Let me calculate that."
    return None


def _question(prompt: str, start: int, quoted: re.Match[str] | None) -> str:
    """ "Ask me for my favourite colour" → "What is your favourite colour?"."""
    if quoted:
        return quoted.group(1)
    rest = prompt[start:].strip(" .?!")
    for lead in ("for ", "about ", "to ", "what "):
        rest = rest.removeprefix(lead)
    if not rest:
        return "What would you like to tell me?"
    if rest.startswith("my "):
        return f"What is your {rest[3:]}?"
    return f"Please tell me: {rest}?"


def answer(prompt: str, tool: str, output: Any, is_error: bool) -> str:
    """The final text for a tool result, quoting what the tool returned."""
    if is_error:
        return f"The {tool} call did not succeed: {_show(output)}"
    if tool == "ask_human":
        return f"You answered: {_show(output)}"
    if not isinstance(output, dict):
        return f"{tool} returned: {_show(output)}"
    if tool == "clock":
        place, _ = _place(prompt)
        zone = output.get("timeZone")
        where = f"in {place}" if place not in ("UTC", zone) else f"in {zone}"
        return f"It is {output.get('display')} {where} ({zone}, {output.get('abbreviation')})."
    if tool == "calculator":
        return f"{output.get('expression')} = {output.get('result')}"
    if tool == "list_dir":
        entries = output.get("entries") or []
        if not entries:
            return "The workspace is empty."
        names = ", ".join(
            e["name"] + ("/" if e.get("type") == "dir" else "")
            for e in entries
            if isinstance(e, dict)
        )
        return f"The workspace contains: {names}."
    if tool == "read_file":
        return f"{output.get('path')} says:\n{output.get('content')}"
    if tool == "write_file":
        verb = "Appended" if output.get("appended") else "Wrote"
        return f"{verb} {output.get('bytes')} bytes to {output.get('path')}."
    if tool == "http_get":
        body = str(output.get("body", ""))
        return (
            f"{output.get('url')} answered {output.get('status')} "
            f"({output.get('contentType')}), {len(body)} characters: {body[:200]}"
        )
    return f"{tool} returned: {_show(output)}"


def _show(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def demo_model(request: ModelCallRequest) -> dict[str, Any]:
    """The ``scripted/demo`` model: answers model call *i* of a turn from the request alone."""
    prompt = _last_user(request)
    tools = {t.name for t in request.tools}
    # Imported here: turns.toml names DEMO_MODEL, and reading it (every `turns show`)
    # should not load the scripted model and asyncio.
    from turncore.model.scripted import call_index

    if call_index(request.messages) == 0:
        try:
            chosen = plan(prompt, tools)
        except Exception:  # a demo must never fail the turn over its own parsing
            chosen = None
        if chosen is None:
            return {"text": HELP}
        name, input, preface = chosen
        return {"text": preface, "toolCalls": [{"toolName": name, "input": input}]}
    last = request.messages[-1]
    if not isinstance(last, ToolMessage):
        final = next(
            (m for m in reversed(request.messages) if isinstance(m, AssistantMessage)), None
        )
        return {"text": "Done." if final is not None else HELP}
    lines = []
    for part in last.content:
        output = part.output
        lines.append(answer(prompt, part.tool_name, output.value, output.type == "error-json"))
    return {"text": "\n".join(lines)}


__all__ = ["DEMO_MODEL", "answer", "demo_model", "plan"]
