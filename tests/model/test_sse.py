"""The SSE decoder: chunking never changes the events; bounds hold."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turncore.model.sse import SseDecoder, SseError, SseEvent


def decode(chunks: list[bytes], limit: int = 1 << 20) -> list[SseEvent]:
    decoder = SseDecoder(limit)
    out: list[SseEvent] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.close())
    return out


def test_fields_comments_and_line_ends() -> None:
    raw = (
        b"\xef\xbb\xbf: a comment\r\n"
        b"event: delta\r\n"
        b"data: one\r\n"
        b"data:two\r\n"
        b"id: 7\r\n"
        b"retry: 100\r\n\r\n"
        b'data: {"x": 1}\n\n'
        b"event: lonely\n\n"
        b"data: cr only\r\r"
        b"data: unterminated"
    )
    assert decode([raw]) == [
        SseEvent("delta", "one\ntwo", "7"),
        SseEvent("message", '{"x": 1}', "7"),
        SseEvent("message", "cr only", "7"),
    ]


events_st = st.lists(
    st.tuples(
        st.sampled_from(["", "message", "response.output_text.delta"]),
        st.lists(
            st.text(
                alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
                max_size=20,
            ),
            min_size=1,
            max_size=3,
        ),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(
    events=events_st,
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_chunking_is_invisible(
    events: list[tuple[str, list[str]]], eol: bytes, cuts: list[int]
) -> None:
    raw = b""
    for name, lines in events:
        if name:
            raw += b"event: " + name.encode() + eol
        for line in lines:
            raw += b"data: " + line.encode() + eol
        raw += eol
    whole = decode([raw])
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert decode(pieces) == whole
    assert decode([bytes([b]) for b in raw]) == whole
    assert [e.data for e in whole] == ["\n".join(lines) for _, lines in events]


def test_bounds() -> None:
    with pytest.raises(SseError) as info:
        decode([b"data: " + b"x" * 5000], limit=1000)
    assert info.value.too_large
    with pytest.raises(SseError) as info:
        decode([b"data: xxxxxxxx\n" * 200], limit=1000)
    assert info.value.too_large
    with pytest.raises(SseError) as info:
        decode([b"data: \xff\xfe\n\n"])
    assert not info.value.too_large
