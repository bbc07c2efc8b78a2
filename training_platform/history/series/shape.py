"""Stage 4 of a series answer: the JSON body, one array per series and column.

`bucket_answer` answers from merged buckets (`Bucket`s and stored
`PackedBucket`s / `PackedRun`s), `exact_answer` from exact rows (non-finite
values as the API's strings "NaN", "Infinity", "-Infinity":
`wire.NONFINITE_NAMES`), `empty_answer` when nothing is stored in the range.
Each keeps at most `max_series` series and only as many as keep the body
within `max_bytes` (`bounded`); the others are named in `series_omitted`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import truediv
from typing import Any, Final

import orjson

from training_platform.callbacks.wire.schema import nonfinite_name
from training_platform.history.series.buckets import FINITE, MAX, MIN, NONFINITE, SUM
from training_platform.history.series.plan import SeriesPlan
from training_platform.history.series.read import ExactRows, Piece
from training_platform.history.series.stored.codec import PackedBucket, PackedRun, unpack_floats

OMITTED_NAMES_BYTES: Final = 16 * 1024  # `series_omitted` lists names up to this much JSON


def empty_answer(
    job_id: str, max_points: int, start_step: int | None, end_step: int | None
) -> dict[str, Any]:
    """The body for a range without a stored step (the range as asked)."""
    return {
        "job_id": job_id,
        "max_points": max_points,
        "start_step": start_step,
        "end_step": end_step,
        "downsampled": False,
        "bucket_steps": 1,
        "count": 0,
        "steps": [],
        "series": {},
        "timestamps": [],
        "truncated": False,
        "series_omitted": [],
        "series_omitted_count": 0,
    }


def exact_answer(
    plan: SeriesPlan,
    rows: ExactRows,
    fields: frozenset[str] | None,
    *,
    max_series: int | None,
    max_bytes: int | None,
) -> dict[str, Any]:
    """The body of exact rows: per series its ``values``."""
    omitted: list[str] = []
    columns = values_to_json(
        rows.steps, rows.values, fields, max_series=max_series, omitted=omitted
    )
    body = {
        **_range_of(plan),
        "downsampled": False,
        "bucket_steps": 1,
        "count": len(rows.steps),
        **columns,
        "timestamps": rows.timestamps,
    }
    return bounded(body, omitted, max_bytes)


def bucket_answer(
    plan: SeriesPlan,
    buckets: Sequence[Piece],
    fields: frozenset[str] | None,
    *,
    max_series: int | None,
    max_bytes: int | None,
) -> dict[str, Any]:
    """The body of merged buckets: per series ``min``, ``max``, ``mean``, ``nonfinite``."""
    omitted: list[str] = []
    columns = buckets_to_json(buckets, fields, max_series=max_series, omitted=omitted)
    body = {
        **_range_of(plan),
        "downsampled": True,
        "bucket_steps": plan.width,
        "count": point_count(buckets),
        **columns,
        # Each bucket knows the time of its first record (metric_rollups.first_timestamp).
        "timestamps": column_of(buckets, "first_timestamp"),
    }
    return bounded(body, omitted, max_bytes)


def _range_of(plan: SeriesPlan) -> dict[str, Any]:
    return {
        "job_id": plan.job_id,
        "max_points": plan.max_points,
        "start_step": plan.lo,
        "end_step": plan.hi,
    }


def bounded(body: dict[str, Any], omitted: list[str], max_bytes: int | None) -> dict[str, Any]:
    """`body` with only the series whose JSON fits in `max_bytes` (in name order, greedy).

    Everything but the series (steps, last_steps, timestamps: at most
    MAX_POINTS each) is always kept; the setting's minimum leaves room for it.
    """
    series: dict[str, Any] = body["series"]
    if max_bytes is not None:
        room = max_bytes - len(orjson.dumps({**body, "series": {}})) - OMITTED_NAMES_BYTES - 64
        kept: dict[str, Any] = {}
        for key, columns in series.items():
            size = len(orjson.dumps({key: columns}))
            if size <= room:
                kept[key] = columns
                room -= size
            else:
                omitted.append(key)
        series = kept
    omitted.sort()
    listed: list[str] = []
    size = 0
    for name in omitted:  # names are bounded too: a run may invent very long keys
        size += len(orjson.dumps(name)) + 1
        if size > OMITTED_NAMES_BYTES:
            break
        listed.append(name)
    return {
        **body,
        "series": series,
        "truncated": bool(omitted),
        "series_omitted": listed,
        "series_omitted_count": len(omitted),
    }


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


def point_count(pieces: Sequence[Piece]) -> int:
    """Buckets in `pieces`, each bucket of a run counted."""
    return sum(len(piece) if isinstance(piece, PackedRun) else 1 for piece in pieces)


def column_of(pieces: Sequence[Piece], name: str) -> list[Any]:
    """Each bucket's `first_step`, `last_step` or `first_timestamp`, runs unrolled."""
    out: list[Any] = []
    for piece in pieces:
        if isinstance(piece, PackedRun):
            out += getattr(piece, name + "s")
        else:
            out.append(getattr(piece, name))
    return out
