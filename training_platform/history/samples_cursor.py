"""The samples pages' cursor: a row's sort key, checksummed, naming its sort and order.

The cursor carries the last row's sort key `(value, step, index)`; the next
page starts strictly after it. It is checksummed and names its sort and
order, so an edited cursor, or one given with another sort or order, is
refused (`InvalidParameterError`): the checksum guards against mistakes, not
forgery, and a forged cursor can only name a position any filter could name
anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from typing import Any, Final, Literal

import orjson

from training_platform.callbacks.wire.samples import MAX_INDEX
from training_platform.callbacks.wire.schema import MAX_STEP
from training_platform.errors import InvalidParameterError

SampleSort = Literal["step", "reward", "length"]
SortOrder = Literal["asc", "desc"]
SORTS: Final = ("step", "reward", "length")
ORDERS: Final = ("asc", "desc")
# The sort key of a row: (sort value, step, index); the value is None for "step".
SortKey = tuple[float | int | None, int, int]

_CURSOR_VERSION: Final = 1
_CURSOR_KEY: Final = b"training_platform samples cursor"
_CHECK_BYTES: Final = 8
MAX_CURSOR_CHARS: Final = 512


def _check(payload: bytes) -> bytes:
    return hmac.digest(_CURSOR_KEY, payload, hashlib.sha256)[:_CHECK_BYTES]


def encode_cursor(sort: SampleSort, order: SortOrder, key: SortKey) -> str:
    payload = orjson.dumps([_CURSOR_VERSION, sort, order, *key])
    return _b64(payload + _check(payload))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, sort: SampleSort, order: SortOrder) -> SortKey:
    """The key a cursor carries; `InvalidParameterError` for anything but one of ours."""
    bad = InvalidParameterError("cursor: not a cursor from this endpoint (malformed or edited)")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError) as exc:
        raise bad from exc
    payload, check = raw[:-_CHECK_BYTES], raw[-_CHECK_BYTES:]
    # The canonical spelling only: base64 decoding ignores stray padding bits.
    canonical = _b64(raw) == cursor
    if not canonical or len(raw) <= _CHECK_BYTES or not hmac.compare_digest(check, _check(payload)):
        raise bad
    try:
        version, cursor_sort, cursor_order, value, step, index = orjson.loads(payload)
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise bad from exc
    if version != _CURSOR_VERSION:
        raise bad
    if (cursor_sort, cursor_order) != (sort, order):
        raise InvalidParameterError(
            f"cursor: it continues sort={cursor_sort} order={cursor_order}, "
            f"not sort={sort} order={order}"
        )
    if not (_integer(step, MAX_STEP) and _integer(index, MAX_INDEX) and _value_fits(sort, value)):
        raise bad
    return (float(value) if sort == "reward" and value is not None else value), step, index


def _integer(value: Any, upper: int) -> bool:
    return type(value) is int and 0 <= value <= upper


def _value_fits(sort: SampleSort, value: Any) -> bool:
    if sort == "step":
        return value is None
    if sort == "length":
        return _integer(value, 2**63 - 1)
    return value is None or (
        type(value) in (int, float) and math.isfinite(value)  # a finite reward, or none
    )
