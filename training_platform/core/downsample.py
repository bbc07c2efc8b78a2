"""Min/max-preserving downsampling of metric series (pure: no database here).

A series is one number per step, named ``group.field`` (``loss.actor_loss``,
``timing.rollout``, ``extra.actor/entropy``). Downsampling cuts the step axis
into buckets and keeps, per bucket and series, the minimum, the maximum, the
sum and count of the finite values (hence the mean) and how many values were
NaN or infinite. So a one-step spike is never averaged away: it is the
bucket's max, drawn as the top of the band (what W&B draws in its
full-fidelity mode), and a NaN step still counts in `nonfinite`, never
dropped. Zoomed in far enough, every bucket holds one step and the result is
the raw data.

Buckets merge exactly (min of mins, max of maxes, sums of sums), which is what
lets `core/rollups.py` precompute them once at ingestion and answer a
1M-step history from ~2,000 stored buckets instead of 1M rows.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter, truediv
from typing import Any, Final

from training_platform.callbacks.wire import FREE_GROUPS, GROUP_FIELDS

# Per series and bucket: [min, max, sum, finite count, non-finite count];
# min/max/sum are None while no finite value was seen.
MIN, MAX, SUM, FINITE, NONFINITE = range(5)
Stats = list[Any]
NONFINITE_NAMES: Final = ("NaN", "Infinity", "-Infinity")
_NONFINITE_VALUES: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


_SERIES_GROUPS: Final = (*GROUP_FIELDS, *FREE_GROUPS)


def series_values(record: Mapping[str, Any]) -> dict[str, float | int]:
    """Every number of a record as ``{"group.field": value}`` (NaN/inf included).

    Non-finite values may be floats or the API's strings ("NaN", ...); both
    come out as floats. Booleans and non-numbers are not series.
    """
    values: dict[str, float | int] = {}
    for group in _SERIES_GROUPS:
        _collect(values, group, record.get(group))
    other = record.get("other")
    if isinstance(other, Mapping):
        for group, fields in other.items():
            _collect(values, str(group), fields)
    return values


def _collect(out: dict[str, float | int], group: str, fields: Any) -> None:
    if not isinstance(fields, Mapping):
        return
    for name, value in fields.items():
        kind = type(value)
        if kind is float or kind is int:
            out[f"{group}.{name}"] = value
        elif kind is str and value in _NONFINITE_VALUES:
            out[f"{group}.{name}"] = _NONFINITE_VALUES[value]


_NUMBER_KINDS: Final = frozenset({float, int})


def series_columns(
    records: Sequence[Mapping[str, Any]], groups: Iterable[str]
) -> dict[str, Sequence[Any]] | None:
    """Each series of `groups` over `records`, as ``{"group.field": column}``.

    None when a record has ``other`` groups: those may repeat a series of the
    regular groups (the last one wins within a record, see `series_values`),
    which only the one-record-at-a-time path gets right. Columns may still
    hold non-numbers (`stats_of_columns` filters them).
    """
    if any(["other" in record for record in records]):
        return None
    columns: dict[str, Sequence[Any]] = {}
    for group in groups:
        _group_columns(
            columns, group, [fields for record in records if (fields := record.get(group))]
        )
    return columns


def stats_of_columns(columns: Mapping[str, Sequence[Any]]) -> dict[str, Stats]:
    """`Stats` per series of `series_columns`; series without any number are left out."""
    stats: dict[str, Stats] = {}
    for key, values in columns.items():
        entry = _column_stats(values)
        if entry is not None:
            stats[key] = entry
    return stats


def _group_columns(
    columns: dict[str, Sequence[Any]], group: str, dicts: list[Mapping[str, Any]]
) -> None:
    """Add one group's values, column by column, over several records' `dicts`.

    When every dict has the same fields (the usual case), `itemgetter` and
    `zip` transpose them in C; otherwise values are gathered one by one.
    Columns may still hold non-numbers: `_column_stats` filters them.
    """
    if not dicts:
        return
    names = tuple(dicts[0])
    size = len(names)
    if all(map(size.__eq__, map(len, dicts))):
        try:
            table = list(map(itemgetter(*names), dicts))
        except KeyError:  # as many fields, not the same ones
            table = None
        if table is not None:
            if size == 1:  # itemgetter of one name gives the value itself
                columns[f"{group}.{names[0]}"] = table
                return
            for name, values in zip(names, zip(*table, strict=True), strict=True):
                columns[f"{group}.{name}"] = values
            return
    gathered: dict[str, list[Any]] = {}
    for fields in dicts:
        for name, value in fields.items():
            column = gathered.get(name)
            if column is None:
                gathered[name] = [value]
            else:
                column.append(value)
    for name, gathered_values in gathered.items():
        columns[f"{group}.{name}"] = gathered_values


def _column_stats(values: Sequence[Any]) -> Stats | None:
    """One series' `Stats` over a bucket's values; None when none of them is a number.

    The same filter as `series_values`: floats and ints count (bools do not),
    so do the API's "NaN"/"Infinity"/"-Infinity" strings, nothing else does.
    """
    if not _NUMBER_KINDS.issuperset(map(type, values)):
        values = [
            _NONFINITE_VALUES[value] if type(value) is str else value
            for value in values
            if type(value) is float
            or type(value) is int
            or (type(value) is str and value in _NONFINITE_VALUES)
        ]
        if not values:
            return None
    total = sum(values)
    # A sum is finite iff every term is (barring overflow, which takes the
    # exact path below and keeps its inf sum, as `add_value` would).
    if total - total == 0:
        return [min(values), max(values), total, len(values), 0]
    finite = [v for v in values if v - v == 0]
    if not finite:
        return [None, None, None, 0, len(values)]
    return [min(finite), max(finite), sum(finite), len(finite), len(values) - len(finite)]


def add_value(stats: dict[str, Stats], key: str, value: float | int) -> None:
    """Fold one value into a bucket's stats."""
    entry = stats.get(key)
    if entry is None:
        entry = stats[key] = [None, None, None, 0, 0]
    # `v - v != 0` is true exactly for NaN and +-inf (cheaper than math.isfinite).
    if value - value != 0:
        entry[NONFINITE] += 1
        return
    if entry[FINITE] == 0:
        entry[MIN] = entry[MAX] = entry[SUM] = value
    else:
        if value < entry[MIN]:
            entry[MIN] = value
        elif value > entry[MAX]:
            entry[MAX] = value
        entry[SUM] += value
    entry[FINITE] += 1


def merge_stats(into: dict[str, Stats], other: Mapping[str, Stats]) -> None:
    """Fold another bucket's stats into `into` (exact: min/max/sum/counts combine)."""
    for key, theirs in other.items():
        mine = into.get(key)
        if mine is None:
            into[key] = list(theirs)
            continue
        if theirs[FINITE]:
            if mine[FINITE] == 0:
                mine[MIN], mine[MAX], mine[SUM] = theirs[MIN], theirs[MAX], theirs[SUM]
            else:
                mine[MIN] = min(mine[MIN], theirs[MIN])
                mine[MAX] = max(mine[MAX], theirs[MAX])
                mine[SUM] += theirs[SUM]
            mine[FINITE] += theirs[FINITE]
        mine[NONFINITE] += theirs[NONFINITE]


@dataclass
class Bucket:
    """The steps `first_step`..`last_step` (those present), summarised per series."""

    first_step: int
    last_step: int
    rows: int = 0
    stats: dict[str, Stats] = field(default_factory=dict)

    @classmethod
    def of_record(cls, step: int, values: Mapping[str, float | int]) -> Bucket:
        bucket = cls(step, step)
        bucket.add(step, values)
        return bucket

    @classmethod
    def of_records(cls, records: Iterable[tuple[int, Mapping[str, Any]]]) -> Bucket:
        """A bucket of several `(step, record)`: the same stats as adding them one by one.

        Consecutive steps nearly always log the same fields, so each group of
        the bucket's records is transposed into columns in C (`itemgetter`,
        `zip`), and each column's min, max and sum are C calls too: no Python
        work per value, only per group and series.
        """
        pairs = list(records)
        columns = series_columns([record for _, record in pairs], _SERIES_GROUPS)
        if columns is None:
            bucket = cls(pairs[0][0], pairs[0][0])
            for step, record in pairs:
                bucket.add(step, series_values(record))
            return bucket
        steps = [step for step, _ in pairs]
        return cls(min(steps), max(steps), len(steps), stats_of_columns(columns))

    def add(self, step: int, values: Mapping[str, float | int]) -> None:
        self.first_step = min(self.first_step, step)
        self.last_step = max(self.last_step, step)
        self.rows += 1
        for key, value in values.items():
            add_value(self.stats, key, value)

    def merge(self, other: Bucket | PackedBucket) -> None:
        self.first_step = min(self.first_step, other.first_step)
        self.last_step = max(self.last_step, other.last_step)
        self.rows += other.rows
        merge_stats(self.stats, other.stats)


def unpack_floats(payload: bytes) -> array[float]:
    """Little-endian float64s (the packed part of a stored bucket) as an array."""
    values = array("d")
    values.frombytes(payload)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def unpack_stats(keys: Sequence[str], payload: bytes) -> dict[str, Stats]:
    """Five float64 per series (NaN: no finite value) as `Stats` (see rollups.encode_stats)."""
    flat = unpack_floats(payload).tolist()
    stats: dict[str, Stats] = {}
    for i, key in enumerate(keys):
        low, high, total, finite, nonfinite = flat[5 * i : 5 * i + 5]
        if finite:
            stats[key] = [low, high, total, int(finite), int(nonfinite)]
        else:
            stats[key] = [None, None, None, 0, int(nonfinite)]
    return stats


@dataclass
class PackedBucket:
    """A stored bucket as read, its stats still packed: `keys` and five float64 per key.

    Reads pass it through untouched to `buckets_to_json`, which slices each
    series out of many such buckets at once; `stats` unpacks it (only when it
    has to be merged with another piece). Buckets read together with the same
    series share one `keys` list, which is how runs of them are recognised.
    """

    first_step: int
    last_step: int
    rows: int
    keys: list[str]
    payload: bytes

    @property
    def stats(self) -> dict[str, Stats]:
        return unpack_stats(self.keys, self.payload)


Piece = Bucket | PackedBucket


def bucket_width(start_step: int, end_step: int, max_points: int) -> int:
    """The smallest whole number of steps per bucket giving at most `max_points` buckets."""
    span = end_step - start_step + 1
    return max(1, -(-span // max_points))


def coalesce(pieces: Iterable[Piece], start_step: int, width: int) -> list[Piece]:
    """Merge step-ordered pieces into buckets `[start_step + k*width, ...)`.

    A piece goes to the bucket its first step falls in, so the result has at
    most ceil(span / width) buckets whatever the pieces were (rows, rollup
    nodes of any size), and empty buckets are simply absent. A piece alone in
    its bucket is passed through as it is (the pieces are not reused).
    """
    out: list[Piece] = []
    current_index: int | None = None
    merged: Bucket | None = None  # out[-1] once it is a copy; None while it is a piece
    for piece in pieces:
        index = (piece.first_step - start_step) // width
        if index != current_index:
            out.append(piece)
            current_index = index
            merged = None
            continue
        if merged is None:
            # A second piece for this bucket: merge into a copy, not into the piece.
            first = out[-1]
            merged = Bucket(first.first_step, first.last_step)
            merged.merge(first)
            out[-1] = merged
        merged.merge(piece)
    return out


@dataclass(frozen=True)
class Span:
    """Steps `lo`..`hi` covered by `level` buckets `first`..`last` (level -1: raw rows)."""

    level: int
    lo: int
    hi: int
    first: int = 0
    last: int = -1


def cover(lo: int, hi: int, widths: tuple[int, ...], top: int) -> Iterator[Span]:
    """Split `[lo, hi]` into runs of whole aligned buckets, coarsest first, in step order.

    Level `top` buckets (of `widths[top]` steps, aligned to multiples of it)
    cover the middle; the ragged ends go to finer levels, and what no bucket
    fits becomes a raw run (level -1) of fewer than `widths[0]` steps per end.
    Exactly `[lo, hi]` is covered: nothing outside the range leaks in.
    """
    if lo > hi:
        return
    if top < 0:
        yield Span(-1, lo, hi)
        return
    width = widths[top]
    first = -(-lo // width)
    last = (hi + 1) // width - 1
    if first > last:
        yield from cover(lo, hi, widths, top - 1)
        return
    yield from cover(lo, first * width - 1, widths, top - 1)
    yield Span(top, first * width, (last + 1) * width - 1, first, last)
    yield from cover((last + 1) * width, hi, widths, top - 1)


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
        if isinstance(run[0], PackedBucket):
            _packed_columns(run_keys, run, keys, series)  # type: ignore[arg-type]
        else:
            _entry_columns(run, keys, series)
    return {
        "steps": [b.first_step for b in buckets],
        "last_steps": [b.last_step for b in buckets],
        "series": series,
    }


def _runs_of(buckets: Sequence[Piece]) -> Iterator[tuple[Sequence[str], list[Piece]]]:
    """Maximal runs of packed buckets sharing `keys`, and of other buckets, with their keys."""
    run: list[Piece] = []
    run_keys: list[str] | None = None  # the shared keys of a packed run; None: other buckets
    for bucket in buckets:
        keys = bucket.keys if isinstance(bucket, PackedBucket) else None
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
    for bucket in run:
        present.update(bucket.stats)
    return list(present)


def _entry_columns(
    run: list[Piece], keys: list[str], series: dict[str, dict[str, list[Any]]]
) -> None:
    """Append the run's buckets to the columns, one stats entry at a time."""
    stats = [b.stats for b in run]
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
    run: list[PackedBucket],
    keys: list[str],
    series: dict[str, dict[str, list[Any]]],
) -> None:
    """Append a run of packed buckets with the same series: strided slices of their floats.

    The same values as unpacking each bucket (`unpack_stats`) and going
    through `_entry_columns`: NaN min/max/sum (no finite value) become None,
    as does the mean; counts become ints.
    """
    flat = unpack_floats(b"".join([b.payload for b in run]))
    count = len(run)
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
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"
