"""Encrypted Temporal payloads: an AES-256-GCM payload codec with key ids.

Theory of operation
-------------------
Everything turncore hands to Temporal — workflow inputs, activity inputs and
results, signals, updates, queries and their answers, the memo — passes
through the client's data converter. With ``[temporal] payload_key_env`` set
in ``turns.toml`` the converter gets this codec: each payload is serialised
whole (metadata and data), sealed with AES-256-GCM under the *current* key,
and replaced by a payload whose metadata says only ``binary/encrypted`` and
the key id. Search attributes are not payloads and stay readable (they hold
status, agent, model, session and pending-input ids, no content).

Keys come from the environment variable the config names, never from the
file: ``ID:BASE64KEY[,ID:BASE64KEY…]`` — 32-byte keys, the first one
encrypts, every one listed decrypts, so a key is rotated by putting a new
key first and dropping the old one once no open workflow needs it.

A payload sealed under a key id this process does not hold, or one that
fails authentication, raises a *non-retryable* ``ApplicationError`` naming
the key id. In a worker that fails the workflow run at once (the SDK fails
the execution, not the task, for a non-retryable error) instead of retrying
a workflow task forever, so nothing is appended to the turn and the caller
gets the reason; ``turns recover`` starts a fresh run once the keys agree.

A payload without the ``binary/encrypted`` encoding is passed through, so
histories written before encryption was turned on still replay.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
CIPHER = "encryption-cipher"
CIPHER_NAME = b"AES-256-GCM"
NONCE_BYTES = 12
KEY_BYTES = 32
_KEY_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


class PayloadKeyError(ValueError):
    """The key variable is missing or malformed (a configuration problem)."""


@dataclass(frozen=True)
class PayloadKeys:
    """The keys of one process: the first encrypts, all decrypt."""

    keys: tuple[tuple[str, bytes], ...]
    source: str
    """The environment variable they came from (named in errors)."""

    @property
    def current(self) -> str:
        return self.keys[0][0]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.keys)

    @classmethod
    def parse(cls, text: str, source: str) -> PayloadKeys:
        """``ID:BASE64KEY[,ID:BASE64KEY…]``; errors never echo key material."""
        keys: list[tuple[str, bytes]] = []
        for n, item in enumerate(text.split(","), start=1):
            item = item.strip()
            kid, sep, encoded = item.partition(":")
            if not sep or not _KEY_ID_RE.fullmatch(kid):
                raise PayloadKeyError(
                    f"${source}: entry {n} is not ID:BASE64KEY (an id of 1-64 letters, digits, "
                    "'.', '_' or '-')"
                )
            raw = _decode_key(encoded)
            if (raw is None or len(raw) != KEY_BYTES) and len(_decode_key(kid) or b"") == KEY_BYTES:
                # A URL-safe or unpadded key is a valid id too: this entry is the
                # key first, and its "id" must not be repeated.
                raise PayloadKeyError(
                    f"${source}: entry {n} looks like BASE64KEY:ID, the key first; "
                    "write ID:BASE64KEY"
                )
            if raw is None:
                raise PayloadKeyError(f"${source}: key {kid!r} is not base64")
            if len(raw) != KEY_BYTES:
                raise PayloadKeyError(
                    f"${source}: key {kid!r} is {len(raw)} bytes; AES-256 needs {KEY_BYTES}"
                )
            if any(kid == k for k, _ in keys):
                raise PayloadKeyError(f"${source}: key id {kid!r} is listed twice")
            keys.append((kid, raw))
        return cls(tuple(keys), source)

    @classmethod
    def from_env(cls, name: str, env: Mapping[str, str] | None = None) -> PayloadKeys:
        env = os.environ if env is None else env
        text = env.get(name, "").strip()
        if not text:
            raise PayloadKeyError(
                f"turns.toml [temporal] payload_key_env names ${name}, which is not set "
                "(expected ID:BASE64KEY with a 32-byte key; see docs/operations.md)"
            )
        return cls.parse(text, name)


def _decode_key(encoded: str) -> bytes | None:
    """Standard or URL-safe base64, padded or not; None if it is neither."""
    try:
        standard = encoded.replace("-", "+").replace("_", "/")
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def new_key_spec(key_id: str) -> str:
    """A fresh ``ID:BASE64KEY`` for the key variable (``turns codec-server --new-key``)."""
    if not _KEY_ID_RE.fullmatch(key_id):
        raise PayloadKeyError(f"key id {key_id!r}: 1-64 letters, digits, '.', '_' or '-'")
    return f"{key_id}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole serialised payloads, tagged with the key id."""

    def __init__(self, keys: PayloadKeys) -> None:
        self._keys = keys
        self._ciphers = {kid: AESGCM(raw) for kid, raw in keys.keys}

    @property
    def keys(self) -> PayloadKeys:
        return self._keys

    def encode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        kid = self._keys.current
        cipher = self._ciphers[kid]
        out = []
        for p in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = cipher.encrypt(nonce, p.SerializeToString(), kid.encode())
            out.append(
                Payload(
                    metadata={"encoding": ENCODING, KEY_ID: kid.encode(), CIPHER: CIPHER_NAME},
                    data=nonce + sealed,
                )
            )
        return out

    def decode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                out.append(p)  # written before encryption was on: readable as it is
                continue
            kid = p.metadata.get(KEY_ID, b"").decode("utf-8", "replace")
            cipher = self._ciphers.get(kid)
            if cipher is None:
                raise _key_failure(
                    f"a Temporal payload is encrypted with key id {kid!r}, which this process "
                    f"does not hold (${self._keys.source} holds {', '.join(self._keys.ids)}); "
                    "the client and the workers must share the key"
                )
            try:
                plain = cipher.decrypt(p.data[:NONCE_BYTES], p.data[NONCE_BYTES:], kid.encode())
            except InvalidTag:
                raise _key_failure(
                    f"a Temporal payload encrypted with key id {kid!r} does not decrypt with "
                    f"this process's key {kid!r} from ${self._keys.source} (two different keys "
                    "under one id, or a tampered payload)"
                ) from None
            inner = Payload()
            inner.ParseFromString(plain)
            out.append(inner)
        return out

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.encode_sync(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decode_sync(payloads)


def _key_failure(message: str) -> ApplicationError:
    # Non-retryable: a worker fails the run with this reason instead of
    # retrying a workflow task that can never succeed.
    return ApplicationError(message, type="PayloadKeyError", non_retryable=True)


def codec_from_env(
    key_env: str | None, env: Mapping[str, str] | None = None
) -> EncryptionCodec | None:
    """The codec ``[temporal] payload_key_env`` asks for, or None when encryption is off."""
    if key_env is None:
        return None
    return EncryptionCodec(PayloadKeys.from_env(key_env, env))


__all__ = [
    "ENCODING",
    "KEY_ID",
    "EncryptionCodec",
    "PayloadKeyError",
    "PayloadKeys",
    "codec_from_env",
    "new_key_spec",
]
