"""Untrusted text in a terminal, and command lines people paste into a shell.

Model text, tool names, inputs and outputs, and tool call ids are chosen by
whoever answers a model call, not by the operator. Shown to a person they pass
through :func:`visible`, which writes control characters as escapes; a command
the operator is told to run is built by :func:`command_line`, which quotes
every word, so that pasting it runs exactly the command it names.
"""

from __future__ import annotations

import io
import os
import re
import shlex
from collections.abc import Mapping
from typing import Any, TextIO

PROG = "turns"

# C0 controls but newline and tab, DEL, C1 controls (a lone U+009B is a CSI on
# some terminals), and the bidirectional overrides and isolates that can make a
# line read differently from what it holds ("Trojan Source").
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as an escape
    (ESC as ``\\x1b``), so that text from a model, a tool or a file cannot set
    the window title, clear the screen, make links or write the clipboard."""
    return _CONTROLS.sub(_escape, text)


class VisibleText(io.TextIOBase):
    """A text stream for people: what is written shows its control characters
    (:func:`visible`); ``control`` writes the command's own terminal codes (colour,
    the spinner) as they are. ``buffer`` stays raw for byte-exact output."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(visible(text))
        return len(text)

    def control(self, codes: str) -> None:
        self.inner.write(codes)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def buffer(self) -> Any:
        return self.inner.buffer

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding


def control(out: TextIO, codes: str) -> None:
    """Write terminal codes past a :class:`VisibleText` (anything else takes them as is)."""
    if isinstance(out, VisibleText):
        out.control(codes)
    else:
        out.write(codes)


def shell_word(word: str) -> str:
    """One word of a command line a person will paste into a shell, quoted.

    ``shlex.quote`` where the word is printable; a word holding a control
    character (a newline in a tool call id) is written ``$'…'`` with escapes, so
    that the printed line stays one visible line and still pastes exactly (bash,
    zsh and ksh read ``$'…'``)."""
    if not _CONTROLS.search(word) and "\n" not in word and "\t" not in word:
        return shlex.quote(word)
    out = []
    for ch in word:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif _CONTROLS.match(ch):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def command_line(*argv: str, env: Mapping[str, str] | None = None) -> str:
    """``turns ARGV…`` as a line to paste: every word quoted (a tool call id is the
    model's choice, so ``c;touch x`` must stay one argument), with ``TURNS_HOME=…``
    in front when the work dir is not the default."""
    return " ".join([continue_prefix(env), *(shell_word(a) for a in argv)])


def continue_prefix(env: Mapping[str, str] | None = None) -> str:
    """``turns``, with ``TURNS_HOME=…`` in front when the work dir is not the default."""
    env = os.environ if env is None else env
    home = env.get("TURNS_HOME")
    if home:
        return f"TURNS_HOME={shell_word(os.path.abspath(home))} {PROG}"
    return PROG
