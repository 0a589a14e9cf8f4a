"""The base every durable or wire-visible model shares.

Python attribute names are snake_case; the wire names are the spec's
camelCase, produced by the alias generator so nothing is renamed by hand.
Optional fields that are absent stay absent on the wire (never ``null``),
because the spec's ``field?: T`` does not admit ``null``.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

T = TypeVar("T")


def _is_none(value: Any) -> bool:
    return value is None


class WireModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict with wire names."""
        return self.model_dump(mode="json")


Opt = Annotated[T | None, Field(default=None, exclude_if=_is_none)]
"""An optional field that is omitted from the wire when absent."""
