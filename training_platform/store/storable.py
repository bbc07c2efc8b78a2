"""Make a record's values storable in both databases, and readable back out.

A line can parse and still be impossible to store or to serve: orjson reads
1,024 levels of nesting but writes only 254, a lone surrogate (`"\\udce9"`,
legal JSON) is not UTF-8, PostgreSQL text refuses NUL and `varchar(64)`
refuses a 65th character. Every such value is fixed here, before it reaches
SQL, by the same rules on SQLite and PostgreSQL:

- JSON values (`timing`, `extra`, `other`, `anomalies`): nesting deeper than
  `MAX_JSON_DEPTH` and any value whose JSON exceeds `MAX_JSON_VALUE_BYTES`
  become a `"<dropped: ...>"` marker string; a whole group over
  `MAX_JSON_GROUP_BYTES` keeps its keys in order while they fit; lone
  surrogates (in keys too) become U+FFFD. NUL stays: `json` columns escape it.
- text columns: lone surrogates become U+FFFD, NUL is removed, and lengths are
  cut to the column's width (`anomalies.type` is `varchar(64)`).

Each change is described in `notes` (the persister reports them). The common
case costs one `isascii()` per string and one depth walk per non-scalar value.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from training_platform.callbacks.wire.schema import INT64_MAX, INT64_MIN

MAX_JSON_DEPTH: Final = 64  # far below orjson's 254, leaving room for the response around it
MAX_JSON_VALUE_BYTES: Final = 64 * 1024
MAX_JSON_GROUP_BYTES: Final = 256 * 1024
ANOMALY_TYPE_CHARS: Final = 64  # models.Anomaly.type: String(64)
ANOMALY_MESSAGE_CHARS: Final = 4096
STATUS_TEXT_CHARS: Final = 4096  # jobs.anomaly_reason from the status file
_SCALARS: Final = frozenset({float, int, bool, type(None)})


def marker(reason: str) -> str:
    """What a dropped JSON value is stored as: visible in the API, never a number."""
    return f"<dropped: {reason}>"


def storable_text(value: str, max_chars: int | None = None) -> str:
    """`value` without lone surrogates (-> U+FFFD) and NUL, at most `max_chars` long."""
    if not value.isascii():
        value = _valid_unicode(value)
    if "\x00" in value:
        value = value.replace("\x00", "")
    if max_chars is not None and len(value) > max_chars:
        value = value[:max_chars]
    return value


def unstorable_character(value: str) -> str | None:
    """What in `value` no text column can hold as it is (a NUL byte, a lone
    surrogate), said for an error message; None when it can be stored as given.

    Input that arrives through the API is refused with this (422) rather than
    cleaned as ingested lines are: a request can be corrected, a file line cannot.
    """
    if "\x00" in value:
        return "a NUL character"
    if not value.isascii() and _valid_unicode(value) is not value:
        return "a lone surrogate (not valid UTF-8)"
    return None


def _valid_unicode(value: str) -> str:
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        # A surrogate pair already decoded into one character never gets here;
        # UTF-16 with surrogatepass round-trips pairs and turns lone halves into U+FFFD.
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def storable_json_group(
    values: dict[str, Any], where: str, notes: list[str] | None
) -> tuple[dict[str, Any], str]:
    """`values` made storable, and its JSON text (see the module doc).

    Returns the dict itself when nothing had to change (the common case: one
    `orjson.dumps` and, only for non-scalar values, a depth walk).
    """
    fixed: dict[str, Any] | None = None
    for key, value in values.items():
        if type(value) in _SCALARS or type(value) is str:
            continue
        reason = _too_deep(value, 1)
        if reason is None:
            continue
        if fixed is None:
            fixed = dict(values)
        fixed[key] = marker(reason)
        _note(notes, f"{where}.{_printable(key)}: {reason}")
    current = values if fixed is None else fixed
    try:
        text = orjson.dumps(current)
    except TypeError:  # orjson.JSONEncodeError: lone surrogates, mostly
        current = {_json_key(k): _json_value(v) for k, v in current.items()}
        _note(notes, f"{where}: invalid UTF-16 (lone surrogates) replaced by U+FFFD")
        text = _dumps_or_mark(current, where, notes)
    if len(text) > MAX_JSON_VALUE_BYTES:  # only then can a value, or the group, be too big
        current, text = _shrink(current, text, where, notes)
    return current, text.decode()


def _dumps_or_mark(values: dict[str, Any], where: str, notes: list[str] | None) -> bytes:
    """The group's JSON; a value orjson still cannot write becomes a marker (no known case)."""
    try:
        return orjson.dumps(values)
    except TypeError:
        for key, value in list(values.items()):
            try:
                orjson.dumps(value)
            except TypeError as error:
                values[key] = marker(f"not writable as JSON: {error}"[:200])
                _note(notes, f"{where}.{_printable(key)}: not writable as JSON, dropped")
        return orjson.dumps(values)


def _shrink(
    values: dict[str, Any], text: bytes, where: str, notes: list[str] | None
) -> tuple[dict[str, Any], bytes]:
    """Replace values over `MAX_JSON_VALUE_BYTES`, then keep keys while the group fits."""
    kept: dict[str, Any] = {}
    size = 2
    dropped = 0
    for key, value in values.items():
        encoded = orjson.dumps(value)
        if len(encoded) > MAX_JSON_VALUE_BYTES:
            value = marker(f"{len(encoded)} bytes, over {MAX_JSON_VALUE_BYTES}")
            _note(notes, f"{where}.{_printable(key)}: {len(encoded)} bytes of JSON, dropped")
            encoded = orjson.dumps(value)
        entry = len(orjson.dumps(key)) + 1 + len(encoded) + 1
        if size + entry > MAX_JSON_GROUP_BYTES:
            dropped += 1
            continue
        kept[key] = value
        size += entry
    if dropped:
        _note(notes, f"{where}: {dropped} keys dropped to stay under {MAX_JSON_GROUP_BYTES} bytes")
    if len(kept) == len(values) and all(kept[k] is values[k] for k in kept):
        return values, text
    return kept, orjson.dumps(kept)


def _too_deep(value: Any, depth: int) -> str | None:
    """Why `value` (at nesting `depth`) cannot be kept, or None. Iterative: no recursion limit."""
    stack = [(value, depth)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if level > MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            children = item.values() if kind is dict else item
            stack.extend((child, level + 1) for child in children if type(child) not in _SCALARS)
    return None


def _json_key(key: Any) -> str:
    return storable_text(key) if type(key) is str else str(key)


def _json_value(value: Any) -> Any:
    """A copy of `value` with every string's lone surrogates replaced (NUL kept)."""
    kind = type(value)
    if kind is str:
        return value if value.isascii() else _valid_unicode(value)
    if kind is dict:
        return {_json_key(k): _json_value(v) for k, v in value.items()}
    if kind is list:
        return [_json_value(item) for item in value]
    return value


def storable_anomalies(
    anomalies: list[dict[str, Any]], notes: list[str] | None
) -> list[dict[str, Any]]:
    """Callback anomalies whose `type` and `message` fit their columns (the list itself if so)."""
    fixed: list[dict[str, Any]] | None = None
    for index, anomaly in enumerate(anomalies):
        kind, message = anomaly["type"], anomaly["message"]
        clean_kind = storable_text(kind, ANOMALY_TYPE_CHARS)
        clean_message = storable_text(message, ANOMALY_MESSAGE_CHARS)
        if clean_kind is kind and clean_message is message:
            continue
        if fixed is None:
            fixed = list(anomalies)
        fixed[index] = {**anomaly, "type": clean_kind, "message": clean_message}
        _note(notes, f"anomaly {_printable(clean_kind)!r}: type or message made storable")
    return anomalies if fixed is None else fixed


def storable_int(value: int) -> int | None:
    """`value` when a BIGINT column can hold it, else None."""
    return value if INT64_MIN <= value <= INT64_MAX else None


def _printable(key: str) -> str:
    return storable_text(key, 80) if type(key) is str else repr(key)[:80]


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None:
        notes.append(text)
