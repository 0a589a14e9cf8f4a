"""Media parts (seed 000, ContentPart): exactly one source, and projections for
humans that never show bytes, URLs or file ids — ``describe_part`` and the
prompt view of ``turns inspect``."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from tests.builders import TURN_ID, TurnBuilder, turn_created
from turncore.events import TurnCreated
from turncore.ids import turn_path
from turncore.messages import (
    AudioPart,
    FilePart,
    ImagePart,
    TextPart,
    UserMessage,
    describe_part,
)

PNG = base64.b64encode(b"\x89PNG-not-really-0123456789").decode()
URL = "https://secret.example.test/signed?token=SIGNED-URL-CANARY"
FILE_ID = "file-ID-CANARY"


@pytest.mark.parametrize("cls", [ImagePart, AudioPart, FilePart])
@pytest.mark.parametrize(
    "sources",
    [
        {},
        {"url": URL, "data": PNG},
        {"url": URL, "fileId": FILE_ID},
        {"data": PNG, "fileId": FILE_ID},
    ],
)
def test_a_media_part_has_exactly_one_source(cls: Any, sources: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="exactly one source"):
        cls.model_validate({"mediaType": "image/png", **sources})


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (
            ImagePart(media_type="image/png", data=PNG, filename="diagram.png"),
            f"[image · data · image/png · diagram.png · {len(base64.b64decode(PNG))} bytes]",
        ),
        (ImagePart(media_type="image/jpeg", url=URL), "[image · url · image/jpeg]"),
        (AudioPart(media_type="audio/mpeg", file_id=FILE_ID), "[audio · file_id · audio/mpeg]"),
        (
            FilePart(media_type="application/pdf", file_id=FILE_ID, filename="a.pdf"),
            "[file · file_id · application/pdf · a.pdf]",
        ),
        (TextPart(text="hello"), "hello"),
    ],
)
def test_describe_part_shows_kind_source_type_name_size_only(part: Any, expected: str) -> None:
    shown = describe_part(part)
    assert shown == expected
    for secret in (PNG, URL, FILE_ID):
        assert secret not in shown


def _media_turn(home: Path) -> str:
    created = turn_created(TURN_ID)
    media_input = UserMessage(
        content=[
            TextPart(text="What is in these?"),
            ImagePart(media_type="image/png", data=PNG, filename="diagram.png"),
            ImagePart(media_type="image/jpeg", url=URL),
            FilePart(media_type="application/pdf", file_id=FILE_ID),
        ]
    )
    created = TurnCreated.model_validate({**created.to_wire(), "input": media_input.to_wire()})
    b = TurnBuilder(TURN_ID)
    b.events[0] = created
    b.model_call("Looking.")
    b.finish()
    path = turn_path(home, TURN_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(e.to_wire()) + b"\n" for e in b.events))
    return TURN_ID


@pytest.mark.parametrize("as_json", [False, True])
def test_inspect_projects_media_parts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    as_json: bool,
) -> None:
    from turnclient.cli import main

    monkeypatch.setenv("TURNS_HOME", str(tmp_path))
    turn_id = _media_turn(tmp_path)
    code = main(["inspect", turn_id, *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    assert code == 0, out
    for secret in (PNG, URL, FILE_ID):
        assert secret not in out
    if as_json:
        request = orjson.loads(out)
        parts = request["messages"][-1]["content"]
        assert parts[1:] == [
            {
                "type": "image",
                "source": "data",
                "mediaType": "image/png",
                "filename": "diagram.png",
                "bytes": len(base64.b64decode(PNG)),
            },
            {"type": "image", "source": "url", "mediaType": "image/jpeg"},
            {"type": "file", "source": "file_id", "mediaType": "application/pdf"},
        ]
    else:
        assert "[image · data · image/png · diagram.png ·" in out
        assert "[image · url · image/jpeg]" in out
        assert "[file · file_id · application/pdf]" in out


async def test_a_turn_with_media_no_adapter_can_send_is_refused_at_creation(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Refused where it is created, with nothing written — not created and then
    failed at model call 0."""
    from tests.harness import Harness
    from turnclient.lib.api import CreateTurnInput
    from turncore.errors import InvalidInputError
    from turncore.events import RequestedAgent

    async with Harness(temporal_env.client, tmp_path, [{"text": "never"}]) as h:
        image = ImagePart(media_type="image/png", data=PNG)
        for input, context in (
            (UserMessage(content=[TextPart(text="look"), image]), None),
            (UserMessage(content="look"), [UserMessage(content=[image])]),
        ):
            with pytest.raises(
                InvalidInputError,
                match=r"cannot be created: image input .*\(image/png\)",
            ):
                await h.turns.create_turn(
                    CreateTurnInput(
                        agent=RequestedAgent(agent_id="test"),
                        input=input,
                        human_available=True,
                        context=context,
                    )
                )
        assert not (tmp_path / "storage").exists() or not any(
            (tmp_path / "storage").rglob("*.jsonl")
        )
