"""The base of every request body: unknown fields and unstorable text refused.

The query string's rules (api/query_checks.py) hold for bodies too: a NUL
byte or a lone surrogate in any string of a body is a 422 naming its field,
never a DataError from PostgreSQL (a 500) or text SQLite cuts short.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from training_platform.store.storable import unstorable_character


def _check_text(value: Any) -> None:
    """Raise for unstorable text in `value`, a string or a list of strings."""
    texts = value if isinstance(value, list) else [value]
    for text in texts:
        if isinstance(text, str):
            bad = unstorable_character(text)
            if bad is not None:
                raise ValueError(f"contains {bad}, which no text here can hold")


class RequestBody(BaseModel):
    """Extends `BaseModel` for request bodies; nested models check their own fields."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _storable_text(cls, value: Any) -> Any:
        _check_text(value)
        return value
