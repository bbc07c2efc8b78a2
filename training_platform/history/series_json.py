"""Downsampled and raw series as the API's columnar JSON (one array per series and column).

`buckets_to_json` answers from buckets (`downsample.Bucket`s and stored
`bucket_codec.PackedBucket`s), `values_to_json` and `records_to_json` from
raw steps. Non-finite raw values are written as the API's strings ("NaN",
"Infinity", "-Infinity": `wire.NONFINITE_NAMES`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import truediv
from typing import Any

from training_platform.callbacks.wire.schema import nonfinite_name
from training_platform.history.bucket_codec import PackedBucket, PackedRun, unpack_floats
from training_platform.history.downsample import (
    FINITE,
    MAX,
    MIN,
    NONFINITE,
    SUM,
    Piece,
    column_of,
    point_count,
    series_values,
)


def wanted(key: str, fields: frozenset[str] | None) -> bool:
    """`fields` lists series keys (``loss.actor_loss``) or whole groups (``loss``)."""
    return fields is None or key in fields or key.split(".", 1)[0] in fields


def buckets_to_json(
    buckets: Sequence[Piece],
    fields: frozenset[str] | None,
    *,
    max_series: int | None = None,
    omitted: list[str] | None = None,
) -> dict[str, Any]:
    """Columnar arrays, one entry per bucket, for every series present.

    At most `max_series` series, the first in name order; the names of the
    others are appended to `omitted`.

    ``steps``/``last_steps`` bound each bucket; per series ``min``, ``max``,
    ``mean`` (null where the bucket has no finite value of it) and
    ``nonfinite`` (how many NaN/inf values the bucket had). A mean can only
    be infinite when a sum of huge values overflowed; serialise with orjson,
    which writes it as null.

    Runs of stored buckets with the same series (`PackedBucket`s sharing one
    `keys` list: nearly all of a long run's answer) are not unpacked bucket by
    bucket: their payloads are joined into one float64 array and each column
    is a strided slice of it.
    """
    runs = list(_runs_of(buckets))
    present: set[str] = set()
    for keys, _ in runs:
        present.update(keys)
    keys = _at_most(sorted(key for key in present if wanted(key, fields)), max_series, omitted)
    series: dict[str, dict[str, list[Any]]] = {
        key: {"min": [], "max": [], "mean": [], "nonfinite": []} for key in keys
    }
    for run_keys, run in runs:
        if isinstance(run[0], (PackedBucket, PackedRun)):
            _packed_columns(run_keys, run, keys, series)  # type: ignore[arg-type]
        else:
            _entry_columns(run, keys, series)
    return {
        "steps": column_of(buckets, "first_step"),
        "last_steps": column_of(buckets, "last_step"),
        "series": series,
    }


def _runs_of(buckets: Sequence[Piece]) -> Iterator[tuple[Sequence[str], list[Piece]]]:
    """Maximal runs of packed buckets sharing `keys`, and of other buckets, with their keys."""
    run: list[Piece] = []
    run_keys: list[str] | None = None  # the shared keys of a packed run; None: other buckets
    for bucket in buckets:
        keys = bucket.keys if isinstance(bucket, (PackedBucket, PackedRun)) else None
        if run and keys is not run_keys:
            yield _run_keys(run_keys, run), run
            run = []
        run_keys = keys
        run.append(bucket)
    if run:
        yield _run_keys(run_keys, run), run


def _run_keys(keys: list[str] | None, run: list[Piece]) -> Sequence[str]:
    if keys is not None:
        return keys
    present: set[str] = set()
    for bucket in run:  # not packed: `Bucket`s (a packed run has its keys)
        present.update(bucket.stats)  # type: ignore[union-attr]
    return list(present)


def _entry_columns(
    run: list[Piece], keys: list[str], series: dict[str, dict[str, list[Any]]]
) -> None:
    """Append the run's buckets to the columns, one stats entry at a time."""
    stats = [b.stats for b in run]  # type: ignore[union-attr]  # `Bucket`s: see _run_keys
    for key in keys:
        # min/max/sum stay None in an entry without finite values (see add_value).
        entries = [s.get(key) for s in stats]
        columns = series[key]
        columns["min"] += [e and e[MIN] for e in entries]
        columns["max"] += [e and e[MAX] for e in entries]
        columns["mean"] += [e[SUM] / e[FINITE] if e and e[FINITE] else None for e in entries]
        columns["nonfinite"] += [e[NONFINITE] if e else 0 for e in entries]


def _packed_columns(
    run_keys: list[str],
    run: list[PackedBucket | PackedRun],
    keys: list[str],
    series: dict[str, dict[str, list[Any]]],
) -> None:
    """Append a run of packed buckets with the same series: strided slices of their floats.

    The same values as unpacking each bucket (`unpack_stats`) and going
    through `_entry_columns`: NaN min/max/sum (no finite value) become None,
    as does the mean; counts become ints.
    """
    flat = unpack_floats(b"".join([b.payload for b in run]))
    count = point_count(run)
    stride = 5 * len(run_keys)
    position = {key: i for i, key in enumerate(run_keys)}
    for key in keys:
        columns = series[key]
        i = position.get(key)
        if i is None:
            nothing = [None] * count
            columns["min"] += nothing
            columns["max"] += nothing
            columns["mean"] += nothing
            columns["nonfinite"] += [0] * count
            continue
        base = 5 * i
        low = flat[base + MIN :: stride].tolist()
        high = flat[base + MAX :: stride].tolist()
        total = flat[base + SUM :: stride].tolist()
        finite = flat[base + FINITE :: stride]
        columns["nonfinite"] += map(int, flat[base + NONFINITE :: stride])
        if 0.0 in finite:
            counts = finite.tolist()
            columns["min"] += [v if n else None for v, n in zip(low, counts, strict=True)]
            columns["max"] += [v if n else None for v, n in zip(high, counts, strict=True)]
            columns["mean"] += [s / n if n else None for s, n in zip(total, counts, strict=True)]
        else:
            columns["min"] += low
            columns["max"] += high
            columns["mean"] += map(truediv, total, finite)


def records_to_json(records: list[dict[str, Any]], fields: frozenset[str] | None) -> dict[str, Any]:
    """Raw records (API convention: non-finite as strings) as columnar ``values`` arrays."""
    flat = [series_values(record) for record in records]
    return values_to_json([record["step"] for record in records], flat, fields)


def values_to_json(
    steps: list[int],
    flat: Sequence[Mapping[str, float | int]],
    fields: frozenset[str] | None,
    *,
    max_series: int | None = None,
    omitted: list[str] | None = None,
) -> dict[str, Any]:
    """`series_values` of each step as columnar ``values`` arrays (non-finite as strings).

    At most `max_series` series, as `buckets_to_json`.
    """
    keys = sorted({key for values in flat for key in values if wanted(key, fields)})
    keys = _at_most(keys, max_series, omitted)
    series = {key: {"values": [_api_number(values.get(key)) for values in flat]} for key in keys}
    return {"steps": steps, "series": series}


def _at_most(keys: list[str], limit: int | None, omitted: list[str] | None) -> list[str]:
    if limit is None or len(keys) <= limit:
        return keys
    if omitted is not None:
        omitted.extend(keys[limit:])
    return keys[:limit]


def _api_number(value: float | int | None) -> Any:
    if value is None or value - value == 0:
        return value
    return nonfinite_name(value)
