"""A tokens file: one person per line, so the UI can say who decided.

Each line that is not blank and does not start with ``#`` is a name and the
SHA-256 of that person's token, as lowercase or uppercase hex (``sha256:``
prefix optional), separated by whitespace::

    # name          sha256 of the token
    ada             5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
    Grace Hopper    sha256:9f86d081884c7d659a2feb6c3e93c49b5c21c6f4cdea6c4c7a9d8c7c3f0c58c1

The name is everything before the hash (so it may hold spaces). Only hashes
are stored, so the file can be read by whoever runs the server without
giving anybody a token. ``printf %s "$TOKEN" | sha256sum`` makes a line's
hash. A malformed line stops the server from starting, naming the line.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path

_HASH = re.compile(r"(?:sha256:)?([0-9A-Fa-f]{64})")
MAX_NAME = 100


class TokensFileError(ValueError):
    """The tokens file cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class Tokens:
    """Token hashes and the names they belong to."""

    entries: tuple[tuple[str, bytes], ...]
    source: str

    def holder(self, token: str | None) -> str | None:
        """The name whose token this is, or None; every entry is compared (constant time
        per entry), so the time taken says nothing about which one matched."""
        if token is None:
            return None
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: str | None = None
        for name, known in self.entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = name
        return found

    @classmethod
    def parse(cls, text: str, source: str) -> Tokens:
        entries: list[tuple[str, bytes]] = []
        seen: dict[bytes, int] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{source}:{number}"
            parts = line.rsplit(None, 1)
            name = parts[0].strip() if len(parts) == 2 else ""
            match = _HASH.fullmatch(parts[-1])
            if not name or match is None:
                raise TokensFileError(
                    f"{where}: expected a name and the SHA-256 of its token as 64 hex digits "
                    f'(`printf %s "$TOKEN" | sha256sum`), got {_shown(raw)}'
                )
            if len(name) > MAX_NAME or not name.isprintable():
                raise TokensFileError(
                    f"{where}: a name is 1 to {MAX_NAME} printable characters, got {_shown(name)}"
                )
            digest = bytes.fromhex(match.group(1))
            if digest in seen:
                raise TokensFileError(
                    f"{where}: the same token hash as line {seen[digest]}: "
                    "one token names one person"
                )
            seen[digest] = number
            entries.append((name, digest))
        if not entries:
            raise TokensFileError(f"{source}: no tokens (a line is `NAME SHA256-HEX`)")
        return cls(tuple(entries), source)

    @classmethod
    def load(cls, path: str | Path) -> Tokens:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokensFileError(f"cannot read the tokens file {path}: {exc}") from None
        return cls.parse(text, str(path))


def _shown(text: str) -> str:
    """A line in an error, clipped, with any hash-like run masked: a token pasted by
    mistake where its hash belongs is not echoed into logs."""
    masked = re.sub(r"[A-Za-z0-9._~+/=-]{16,}", lambda m: m.group(0)[:4] + "…", text.strip())
    return repr(masked[:80])


__all__ = ["MAX_NAME", "Tokens", "TokensFileError"]
