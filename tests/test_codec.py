"""Encrypted payloads: nothing of a turn's content sits in Temporal history in clear.

A real dev server, real workers and the real ``temporal`` CLI: the history
of a turn run with the codec is grepped for its prompt, its tool input and
its tool output; the codec server decodes what the history holds, for the
CLI (``--codec-endpoint``) and for a browser at Temporal Web's origin.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import select
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turnclient.lib.api import TurnClient
from turnclient.runtime.codec import (
    ENCODING,
    EncryptionCodec,
    PayloadKeyError,
    PayloadKeys,
    new_key_spec,
)
from turnclient.runtime.config import ConfigError, load_config
from turnclient.runtime.connection import ConnectOptions, data_converter
from turnclient.runtime.devserver import find_temporal_cli
from turnclient.servers.codec_server import CodecServer
from turncore.errors import InfrastructureError
from turncore.events import external_input_adapter
from turncore.tools import ToolContext
from turncore_temporal.activities import DATA_CONVERTER
from turncore_temporal.activities.contract import payload_adapter
from turncore_temporal.activities.payloads import ModelCallResult
from turncore_temporal.worker import contexts_matter, typed_client

PROMPT = "Please summarise the zebra-okapi-7731 merger memo"
TOOL_INPUT = "quokka-ledger-5512"
TOOL_OUTPUT = "narwhal-balance-9904"


def codec_of(*specs: str) -> EncryptionCodec:
    return EncryptionCodec(PayloadKeys.parse(",".join(specs), "TURNS_PAYLOAD_KEY"))


def client_with(env: WorkflowEnvironment, codec: EncryptionCodec | None) -> Client:
    base = env.client
    return Client(
        base.service_client,
        namespace=base.namespace,
        data_converter=data_converter(ConnectOptions(payload_codec=codec)),
    )


def show_history(env: WorkflowEnvironment, turn_id: str, *extra: str) -> str:
    address = env.client.service_client.config.target_host
    r = subprocess.run(
        [
            find_temporal_cli(),
            "workflow",
            "show",
            "-w",
            turn_id,
            "--address",
            address,
            "-o",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def with_payloads_decoded(history: str) -> str:
    """The history JSON plus every payload's data, base64-decoded (as a reader would)."""
    return history + "".join(
        base64.b64decode(m).decode("utf-8", "replace") for m in _base64_fields(json.loads(history))
    )


# ---------------------------------------------------------------- the codec itself


async def test_round_trip_rotation_and_errors_naming_the_key_id() -> None:
    k1, k2 = new_key_spec("k1"), new_key_spec("k2")
    old, rotated = codec_of(k1), codec_of(k2, k1)
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"prompt": "secret"}')
    sealed = await old.encode([plain])
    assert sealed[0].metadata["encoding"] == ENCODING
    assert sealed[0].metadata["encryption-key-id"] == b"k1"
    assert b"secret" not in sealed[0].SerializeToString()
    # Rotation: the new key encrypts, the old one still decrypts.
    assert await rotated.decode(sealed) == [plain]
    assert (await rotated.encode([plain]))[0].metadata["encryption-key-id"] == b"k2"
    # Unencrypted payloads (histories from before encryption) pass through.
    assert await old.decode([plain]) == [plain]

    with pytest.raises(ApplicationError) as missing:
        await codec_of(k2).decode(sealed)
    assert "'k1'" in missing.value.message and missing.value.non_retryable
    with pytest.raises(ApplicationError) as mismatch:
        await codec_of(new_key_spec("k1")).decode(sealed)  # another key under the same id
    assert "'k1'" in mismatch.value.message


def test_key_variable_is_checked_without_echoing_key_material() -> None:
    for bad, needle in [
        ("nokey", "ID:BASE64KEY"),
        ("k1:" + base64.b64encode(b"short").decode(), "5 bytes"),
        ("k1:%%%", "not base64"),
        (f"{new_key_spec('k1')},{new_key_spec('k1')}", "twice"),
    ]:
        with pytest.raises(PayloadKeyError) as exc:
            PayloadKeys.parse(bad, "TURNS_PAYLOAD_KEY")
        assert needle in str(exc.value)
    with pytest.raises(PayloadKeyError, match=r"\$NOPE"):
        PayloadKeys.from_env("NOPE", {})


@pytest.mark.parametrize("padded", [True, False])
def test_an_entry_written_key_first_is_refused_without_echoing_the_key(padded: bool) -> None:
    """A URL-safe (or unpadded) key is also a valid key id, so ``KEY:ID`` parses as an
    id and a key; the error must not repeat the "id", which is the key."""
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    key = key if padded else key.rstrip("=")
    for spec in (f"{key}:prod-2026-01", f"{new_key_spec('ok')},{key}:prod"):
        with pytest.raises(PayloadKeyError) as exc:
            PayloadKeys.parse(spec, "TURNS_PAYLOAD_KEY")
        assert key not in str(exc.value) and key.rstrip("=") not in str(exc.value)
        assert "ID:BASE64KEY" in str(exc.value)


def test_turns_toml_names_the_variable_never_the_key(tmp_path: Path) -> None:
    (tmp_path / "turns.toml").write_text('[temporal]\npayload_key_env = "TURNS_PAYLOAD_KEY"\n')
    cfg = load_config(tmp_path, {})
    assert cfg.payload_key_env == "TURNS_PAYLOAD_KEY"
    with pytest.raises(ConfigError, match="not set"):
        ConnectOptions.for_config(cfg, {})
    options = ConnectOptions.for_config(cfg, {"TURNS_PAYLOAD_KEY": new_key_spec("prod-1")})
    assert isinstance(options.payload_codec, EncryptionCodec)
    (tmp_path / "turns.toml").write_text(f'[temporal]\npayload_key_env = "{new_key_spec("x")}"\n')
    with pytest.raises(ConfigError, match="names an environment variable"):
        load_config(tmp_path, {})


# ---------------------------------------------------------------- end to end


def _secret_tool(value: Any, ctx: ToolContext) -> Any:
    assert value == {"account": TOOL_INPUT}
    return TOOL_OUTPUT


def _harness(client: Client, tmp_path: Path, permission: str = "none") -> Harness:
    script = [
        {"toolCalls": [{"toolName": "lookup", "input": {"account": TOOL_INPUT}}]},
        {"text": "The memo balances."},
    ]
    return Harness(
        client,
        tmp_path,
        script,
        tools=[sync_tool("lookup")],
        implementations={"lookup": _secret_tool},
        permissions={"builtin:lookup": permission},
    )


async def test_history_holds_no_content_in_clear_and_the_codec_server_decodes_it(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    codec = codec_of(new_key_spec("prod-1"))
    client = client_with(temporal_env, codec)
    async with _harness(client, tmp_path) as h:
        turn_id, outcome = await h.run(PROMPT)
        assert outcome.status == "completed"
        file_text = h.repo.path_for(turn_id).read_text()
        assert PROMPT in file_text and TOOL_OUTPUT in file_text  # the log stays plaintext
        await h.assert_file_matches_query(turn_id)  # queries decode through the codec

    history = show_history(temporal_env, turn_id)
    for secret in (PROMPT, "zebra-okapi-7731", TOOL_INPUT, TOOL_OUTPUT):
        assert secret not in with_payloads_decoded(history)
    # Sanity: the history does hold the payloads, sealed under the key id, and
    # the same turn without the codec would show them (checked on a plain run).
    assert base64.b64encode(ENCODING).decode() in history
    assert base64.b64encode(b"prod-1").decode() in history
    # Search attributes stay readable: no codec needed to list turns.
    desc = await temporal_env.client.get_workflow_handle(turn_id).describe()
    assert (
        desc.typed_search_attributes.get(SearchAttributeKey.for_keyword("TurnStatus"))
        == "completed"
    )
    assert desc.typed_search_attributes.get(SearchAttributeKey.for_keyword("TurnAgent")) == "test"

    server = CodecServer(codec, token="s3cret-token").start()
    try:
        # The temporal CLI, pointed at the codec server, shows the history decoded.
        decoded = with_payloads_decoded(
            show_history(
                temporal_env,
                turn_id,
                "--codec-endpoint",
                server.url,
                "--codec-auth",
                "Bearer s3cret-token",
            )
        )
        for secret in (PROMPT, TOOL_INPUT, TOOL_OUTPUT):
            assert secret in decoded
        # What a browser on Temporal Web sends: the raw payloads of the first event.
        events = json.loads(history)["events"]
        first = events[0]["workflowExecutionStartedEventAttributes"]
        body = json.dumps({"payloads": first["input"]["payloads"]}).encode()
        status, headers, answer = await asyncio.to_thread(
            _post,
            f"{server.url}/decode",
            body,
            {"Authorization": "Bearer s3cret-token", "Origin": "http://localhost:8233"},
        )
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
        plain = base64.b64decode(json.loads(answer)["payloads"][0]["data"])
        assert turn_id.encode() in plain
        # Without the token, nothing; from another origin, no CORS grant.
        status, _, _ = await asyncio.to_thread(_post, f"{server.url}/decode", body, {})
        assert status == 401
        status, headers, _ = await asyncio.to_thread(
            _post,
            f"{server.url}/decode",
            body,
            {"Authorization": "Bearer s3cret-token", "Origin": "https://evil.example"},
        )
        assert status == 200 and "Access-Control-Allow-Origin" not in headers
    finally:
        server.stop()


async def test_the_same_turn_without_the_codec_shows_its_content(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The grep above can fail: without encryption the history holds the content."""
    async with _harness(temporal_env.client, tmp_path) as h:
        turn_id, outcome = await h.run(PROMPT)
        assert outcome.status == "completed"
    decoded = with_payloads_decoded(show_history(temporal_env, turn_id))
    assert PROMPT in decoded and TOOL_INPUT in decoded and TOOL_OUTPUT in decoded


async def test_client_and_worker_with_different_keys_fail_naming_the_key_id(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    worker_client = client_with(temporal_env, codec_of(new_key_spec("worker-key")))
    caller = client_with(temporal_env, codec_of(new_key_spec("client-key")))
    async with _harness(worker_client, tmp_path) as h:
        turns = TurnClient(caller, h.repo, h.resolver, task_queue=h.task_queue, hub=h.hub)
        turn_id = await h.create(PROMPT)
        with pytest.raises(InfrastructureError) as exc:
            await asyncio.wait_for(turns.advance_turn(turn_id).outcome, 60)
        assert "'client-key'" in str(exc.value)
        assert h.types(turn_id) == ["turn_created"]  # nothing appended


async def test_rotation_in_two_steps_never_meets_a_process_without_the_new_key(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The documented rotation: first every process learns the new key as a second
    (decrypt-only) one, then it moves first. In the second step a caller that already
    encrypts under the new key reaches a worker that still encrypts under the old one,
    and a suspended turn whose history holds both kinds goes on."""
    old, new = new_key_spec("old"), new_key_spec("new")
    learnt = client_with(temporal_env, codec_of(old, new))  # step 1 done; step 2 not yet here
    async with _harness(learnt, tmp_path, permission="ask") as h:
        turn_id = await h.create(PROMPT)
        suspended = await h.turns.advance_turn(turn_id).outcome
        assert suspended.status == "suspended"
        rotated = client_with(temporal_env, codec_of(new, old))  # step 2, this caller first
        caller = TurnClient(rotated, h.repo, h.resolver, task_queue=h.task_queue, hub=h.hub)
        call_id = h.file_state(turn_id).pending_permissions()[0].tool_call_id
        decision = external_input_adapter.validate_python(
            {"type": "permission_decision", "toolCallId": call_id, "decision": "allow"}
        )
        done = await asyncio.wait_for(caller.advance_turn(turn_id, decision).outcome, 60)
        assert done.status == "completed"
    history = show_history(temporal_env, turn_id)
    for key_id in (b"old", b"new"):
        assert base64.b64encode(key_id).decode() in history


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **headers}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _base64_fields(doc: Any) -> list[str]:
    out: list[str] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "data" and isinstance(v, str):
                out.append(v)
            else:
                out.extend(_base64_fields(v))
    elif isinstance(doc, list):
        for v in doc:
            out.extend(_base64_fields(v))
    return out


async def test_the_worker_keeps_the_codec_when_it_swaps_in_the_turn_converter(
    temporal_env: WorkflowEnvironment,
) -> None:
    codec = codec_of(new_key_spec("k1"))
    plain = Client(
        temporal_env.client.service_client,
        namespace=temporal_env.client.namespace,
        data_converter=dataclasses.replace(DataConverter.default, payload_codec=codec),
    )
    typed = typed_client(plain)
    assert typed.data_converter.payload_converter_class is DATA_CONVERTER.payload_converter_class
    assert typed.data_converter.payload_codec is codec
    assert typed_client(typed) is typed


@dataclasses.dataclass(frozen=True)
class _ContextRecordingCodec(PayloadCodec, WithSerializationContext):
    """A codec that takes contexts and records the one it encodes under."""

    seen: list[tuple[SerializationContext | None, bytes]]
    context: SerializationContext | None = None

    def with_context(self, context: SerializationContext) -> _ContextRecordingCodec:
        return dataclasses.replace(self, context=context)  # the same list

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.extend((self.context, p.data) for p in payloads)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def _turn_of(data: bytes) -> object:
    """The ``turn_id`` an activity input names (results name none)."""
    doc = json.loads(data)
    return doc.get("turn_id") if isinstance(doc, dict) else None


def test_only_a_context_taking_codec_or_external_storage_makes_contexts_matter() -> None:
    assert not contexts_matter(DATA_CONVERTER)
    encrypted = dataclasses.replace(DATA_CONVERTER, payload_codec=codec_of(new_key_spec("k1")))
    assert not contexts_matter(encrypted)  # EncryptionCodec seals alike under any context
    recording = dataclasses.replace(DATA_CONVERTER, payload_codec=_ContextRecordingCodec([]))
    assert contexts_matter(recording)


async def test_a_codec_that_takes_contexts_gets_each_activitys_own(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The worker answers payload contexts outside the sandbox only where they
    cannot matter; a codec that takes them still gets the SDK's, per command."""
    seen: list[tuple[SerializationContext | None, bytes]] = []
    base = temporal_env.client
    client = Client(
        base.service_client,
        namespace=base.namespace,
        data_converter=dataclasses.replace(
            DATA_CONVERTER, payload_codec=_ContextRecordingCodec(seen)
        ),
    )
    async with _harness(client, tmp_path) as h:
        turn_id, outcome = await h.run(PROMPT)
        assert outcome.status == "completed"
    # What the workflow encodes: the inputs of the activities it schedules (the
    # activities' results are encoded by the activity worker, under the same kinds).
    scheduled = {
        (c.activity_type, c.is_local)
        for c, data in seen
        if isinstance(c, ActivitySerializationContext)
        and c.workflow_id == turn_id
        and _turn_of(data) == turn_id
    }
    assert ("call_model", False) in scheduled and ("run_tool", False) in scheduled
    assert ("load_turn", True) in scheduled


# ---------------------------------------------------------------- the codec server's door


def _exchange(server: CodecServer, request: bytes) -> bytes:
    """Send raw bytes and read the whole answer (the server closes after it)."""
    host, port = server.address
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _post_raw(host: str, headers: str = "", body: bytes = b"", path: str = "/decode") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{headers}\r\n".encode()
        + body
    )


_PLAIN = json.dumps(
    {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "eyJhIjoxfQ=="}]}
).encode()


def test_without_a_token_only_loopback_host_names_are_answered() -> None:
    """``--no-token`` trusts whoever reaches loopback; a page elsewhere whose name
    rebinds to 127.0.0.1 reaches it too, under its own host name (DNS rebinding)."""
    server = CodecServer(codec_of(new_key_spec("k1")), token=None).start()
    try:
        port = server.address[1]
        length = f"Content-Length: {len(_PLAIN)}\r\n"
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            answer = _exchange(server, _post_raw(host, length, _PLAIN, "/encode"))
            assert answer.startswith(b"HTTP/1.1 200"), (host, answer)
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", ""):
            answer = _exchange(server, _post_raw(host, length, _PLAIN, "/encode"))
            assert answer.startswith(b"HTTP/1.1 403"), (host, answer)
            assert b"encryption-key-id" not in answer
    finally:
        server.stop()


def test_bodies_are_bounded_and_read_only_for_an_authorised_caller() -> None:
    server = CodecServer(codec_of(new_key_spec("k1")), token="t0k", body_timeout=1.0).start()
    try:
        auth = "Authorization: Bearer t0k\r\n"
        host = "127.0.0.1"
        # No token: refused at once, the announced 8 MiB never read.
        answer = _exchange(server, _post_raw(host, f"Content-Length: {8 * 1024 * 1024}\r\n"))
        assert answer.startswith(b"HTTP/1.1 401"), answer
        # A length that is not one, or none: refused, not read to the end of the stream.
        for length in ("-1", "abc", "1e3", "١٢"):
            answer = _exchange(server, _post_raw(host, f"{auth}Content-Length: {length}\r\n"))
            assert answer.startswith(b"HTTP/1.1 400"), (length, answer)
        answer = _exchange(server, _post_raw(host, f"{auth}Transfer-Encoding: chunked\r\n"))
        assert answer.startswith(b"HTTP/1.1 411"), answer
        answer = _exchange(
            server, _post_raw(host, f"{auth}Content-Length: {8 * 1024 * 1024 + 1}\r\n")
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer
        # A body that never arrives: 408 once the body timeout passes, not a thread held forever.
        answer = _exchange(server, _post_raw(host, f"{auth}Content-Length: 100\r\n", b"{"))
        assert answer.startswith(b"HTTP/1.1 408"), answer
        # And a proper request still works.
        length = f"Content-Length: {len(_PLAIN)}\r\n"
        answer = _exchange(server, _post_raw(host, auth + length, _PLAIN, "/encode"))
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        server.stop()


def test_a_caller_that_hangs_up_mid_answer_leaves_no_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Temporal Web closes tabs; the server's stderr is an operator's, not a crash log."""
    server = CodecServer(codec_of(new_key_spec("k1")), token=None).start()
    try:
        data = base64.b64encode(b"x" * (6 * 1024 * 1024 // 4)).decode()
        body = json.dumps(
            {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": data}] * 2}
        ).encode()
        request = _post_raw("127.0.0.1", f"Content-Length: {len(body)}\r\n", body, "/encode")
        for _ in range(3):
            with socket.create_connection(server.address, timeout=30) as s:
                s.sendall(request)
                s.recv(1)  # the answer has begun: hang up with a reset, unread
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The server is still answering, and a whole answer still arrives.
        length = f"Content-Length: {len(_PLAIN)}\r\n"
        answer = _exchange(server, _post_raw("127.0.0.1", length, _PLAIN, "/encode"))
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err


def _ended(s: socket.socket) -> bool:
    """Whether the server has answered or closed ``s``; if not, drip one more header line."""
    readable, _, _ = select.select([s], [], [], 0)
    try:
        if readable:
            s.recv(65536)
            return True
        s.sendall(b"X-Drip: 1\r\n")
    except OSError:
        return True
    return False


def test_slow_senders_are_cut_off_per_request_and_connections_are_capped() -> None:
    """A sender dripping a header line every 0.2 s is cut off when its request's time
    is up, not kept while each read is quick; connections over the cap get a 503 at once."""
    limit = 1.5
    server = CodecServer(
        codec_of(new_key_spec("k1")), token="t0k", body_timeout=limit, max_connections=4
    ).start()
    drips = [socket.create_connection(server.address, timeout=5) for _ in range(4)]
    try:
        started = time.monotonic()
        for s in drips:
            s.sendall(b"POST /decode HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # The four hold every slot: a fifth connection is answered 503 and closed at once.
        with socket.create_connection(server.address, timeout=5) as fifth:
            answer = b""
            while chunk := fifth.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert time.monotonic() - started < limit
        # Each drip ends once its request's time is up, though every read is quick.
        live = list(drips)
        while live and time.monotonic() - started < limit + 10:
            live = [s for s in live if not _ended(s)]
            time.sleep(0.2)
        assert live == [], "slow senders were kept past the request's time"
        # Their slots are free again (each as its thread ends): a proper request is answered.
        auth = "Authorization: Bearer t0k\r\n"
        length = f"Content-Length: {len(_PLAIN)}\r\n"
        request = _post_raw("127.0.0.1", auth + length, _PLAIN, "/encode")
        deadline = time.monotonic() + 10
        while (answer := _exchange(server, request)).startswith(b"HTTP/1.1 503"):
            assert time.monotonic() < deadline, "the slow senders' slots were never freed"
            time.sleep(0.05)
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        for s in drips:
            s.close()
        server.stop()


def test_payload_converters_share_their_type_adapters() -> None:
    """The sandbox makes a converter per workflow run: the second decodes a payload
    type with the adapter the first built, instead of building its schema again."""
    payload = DATA_CONVERTER.payload_converter.to_payloads([ModelCallResult(events=[], offset=3)])
    before = payload_adapter.cache_info()
    for _ in range(3):
        converter = DATA_CONVERTER.payload_converter_class()
        [decoded] = converter.from_payloads(payload, [ModelCallResult])
        assert decoded == ModelCallResult(events=[], offset=3)
    after = payload_adapter.cache_info()
    assert after.misses - before.misses <= 1
    assert after.hits - before.hits >= 2
