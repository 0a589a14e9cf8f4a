"""A small, bounded, incremental Server-Sent Events decoder (WHATWG "event stream").

Bytes go in as they arrive, complete events come out. Lines end in CRLF, LF
or CR (a CR at the end of a chunk waits for the next byte so a split CRLF is
one line end). ``data`` lines of one event are joined with ``\\n``; comment
lines (``:``) are dropped; an event without data is not dispatched; an
unterminated event at end of stream is discarded, as the standard says.
The decoder refuses to buffer more than ``max_event_bytes`` for one line or
one event, so a hostile or broken stream cannot grow memory without bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EOL = re.compile(rb"[\r\n]")
_BOM = b"\xef\xbb\xbf"


class SseError(ValueError):
    """The stream is not a valid or bounded event stream.

    ``too_large`` tells a bounds problem from a malformed one. The message is
    fixed text; stream content is never quoted.
    """

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        self.too_large = too_large
        super().__init__(reason)


@dataclass(frozen=True)
class SseEvent:
    event: str
    """The ``event:`` field, ``message`` when absent."""
    data: str
    id: str | None = None


class SseDecoder:
    def __init__(self, max_event_bytes: int = 4 << 20) -> None:
        self._max = max_event_bytes
        self._buf = bytearray()
        self._data: list[str] = []
        self._size = 0
        self._event = ""
        self._id: str | None = None
        self._first = True

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buf += chunk
        if self._first:
            if len(self._buf) < 3 and _BOM.startswith(bytes(self._buf)):
                return []  # could still be the start of a byte-order mark
            if self._buf.startswith(_BOM):
                del self._buf[:3]
            self._first = False
        out: list[SseEvent] = []
        start = 0
        buf = self._buf
        while True:
            m = _EOL.search(buf, start)
            if m is None:
                break
            end = m.start()
            if buf[end] == 0x0D:
                if end + 1 >= len(buf):
                    break  # a CR at the end may be the first half of CRLF
                step = 2 if buf[end + 1] == 0x0A else 1
            else:
                step = 1
            line = bytes(buf[start:end])
            start = end + step
            event = self._line(line)
            if event is not None:
                out.append(event)
        del buf[:start]
        if len(buf) > self._max:
            raise SseError("an event-stream line exceeds the size bound", too_large=True)
        return out

    def close(self) -> list[SseEvent]:
        """End of stream. A pending CR is a complete line end; a last line without
        one still counts as a line; an event never ended by a blank line is dropped."""
        events = self.feed(b"\n") if self._buf else []
        self._data = []
        self._size = 0
        return events

    def _line(self, raw: bytes) -> SseEvent | None:
        if not raw:
            return self._dispatch()
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SseError("the event stream is not valid UTF-8") from None
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._size += len(raw) + 1
            if self._size > self._max:
                raise SseError("an event exceeds the size bound", too_large=True)
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._id = value
        # "retry" and unknown fields are ignored
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SseEvent(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._data = []
        self._size = 0
        self._event = ""
        return event
