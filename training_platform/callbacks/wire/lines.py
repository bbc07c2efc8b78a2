"""One record <-> one JSONL line: `encode_record` writes it, `decode_line` reads it.

This module is stdlib + orjson only: it runs inside training processes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import orjson

from training_platform.callbacks.wire.records import normalize_record
from training_platform.callbacks.wire.schema import bounded_int
from training_platform.errors import RecordError

_BOM: Final = b"\xef\xbb\xbf"


def _parse_int(digits: str) -> float | int:
    # orjson itself turns integers beyond 64 bits into floats; do the same here.
    return bounded_int(int(digits))


def decode_line(line: bytes) -> dict[str, Any]:
    """Decode one complete JSONL line (without its ``\\n``) into a record.

    The line rules are `parse_json_line`'s. Raises `RecordError` for anything
    that is not a valid record, including invalid UTF-8 and malformed JSON.
    """
    return normalize_record(parse_json_line(line))


def parse_json_line(line: bytes) -> Any:
    """The JSON value of one complete line (without its ``\\n``) of any line file.

    Tolerates a UTF-8 BOM and a trailing ``\\r``; accepts the ``NaN``,
    ``Infinity`` and ``-Infinity`` tokens Python's json writes. Raises
    `RecordError` for invalid UTF-8 and malformed JSON.
    """
    if line.startswith(_BOM):
        line = line[3:]
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        # orjson refuses NaN/Infinity tokens; the stdlib parser takes them.
        try:
            obj = json.loads(line.decode("utf-8"), parse_int=_parse_int)
        except UnicodeDecodeError as exc:
            raise RecordError(f"line is not valid UTF-8: {exc}") from None
        except json.JSONDecodeError as exc:
            raise RecordError(f"malformed JSON: {exc}") from None
        except RecursionError:
            raise RecordError("malformed JSON: nested too deeply") from None
    return obj


def _has_nonfinite(value: Any) -> bool:
    # `v - v != 0.0` is true exactly for NaN and +-Inf and costs no call.
    if type(value) is float:
        return value - value != 0.0
    if type(value) is dict:
        for item in value.values():
            kind = type(item)
            if kind is float:
                if item - item != 0.0:
                    return True
            elif (kind is dict or kind is list) and _has_nonfinite(item):
                return True
        return False
    if type(value) is list:
        return any(_has_nonfinite(item) for item in value)
    return False


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One JSONL line (with its ``\\n``); non-finite floats as ``NaN``/``Infinity``.

    orjson is much faster than json (docs/benchmarks.md, Callback) but
    writes NaN as null, which would turn "the loss was NaN" into "no loss
    logged": non-finite records take the stdlib path, which is rare and
    always correct.
    """
    try:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        # orjson writes NaN/Inf as null: no "null" at all means none were there,
        # which spares the common case the walk over every value.
        if b"null" not in line or not _has_nonfinite(record):
            return line
    except orjson.JSONEncodeError:
        pass  # e.g. an integer beyond 64 bits deep in `extra`: the stdlib writes it
    return json.dumps(record, allow_nan=True, separators=(",", ":")).encode() + b"\n"
