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
lets `history/rollups.py` precompute them once at ingestion and answer a
1M-step history from ~2,000 stored buckets instead of 1M rows. How buckets
are stored is `history/bucket_codec.py`; how they are answered as JSON,
`history/series_json.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final

from training_platform.callbacks.wire.schema import FREE_GROUPS, GROUP_FIELDS, NONFINITE_VALUES
from training_platform.history.bucket_codec import PackedBucket, PackedRun

# Per series and bucket: [min, max, sum, finite count, non-finite count];
# min/max/sum are None while no finite value was seen.
MIN, MAX, SUM, FINITE, NONFINITE = range(5)
Stats = list[Any]


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
        elif kind is str and value in NONFINITE_VALUES:
            out[f"{group}.{name}"] = NONFINITE_VALUES[value]


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
            NONFINITE_VALUES[value] if type(value) is str else value
            for value in values
            if type(value) is float
            or type(value) is int
            or (type(value) is str and value in NONFINITE_VALUES)
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
    first_timestamp: float | None = None  # the record's at `first_step` (None: none)

    @classmethod
    def of_record(
        cls, step: int, values: Mapping[str, float | int], timestamp: Any = None
    ) -> Bucket:
        bucket = cls(step, step)
        bucket.add(step, values, timestamp)
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
                bucket.add(step, series_values(record), record.get("timestamp"))
            return bucket
        steps = [step for step, _ in pairs]
        first = min(pairs, key=itemgetter(0))[1].get("timestamp")
        stats = stats_of_columns(columns)
        return cls(min(steps), max(steps), len(steps), stats, finite_time(first))

    def add(self, step: int, values: Mapping[str, float | int], timestamp: Any = None) -> None:
        if step < self.first_step or (step == self.first_step and self.first_timestamp is None):
            self.first_timestamp = finite_time(timestamp)
        self.first_step = min(self.first_step, step)
        self.last_step = max(self.last_step, step)
        self.rows += 1
        for key, value in values.items():
            add_value(self.stats, key, value)

    def merge(self, other: Bucket | PackedBucket) -> None:
        first = other.first_step
        if first < self.first_step or (first == self.first_step and self.first_timestamp is None):
            self.first_timestamp = other.first_timestamp
        self.first_step = min(self.first_step, other.first_step)
        self.last_step = max(self.last_step, other.last_step)
        self.rows += other.rows
        merge_stats(self.stats, other.stats)


Piece = Bucket | PackedBucket | PackedRun  # a PackedRun: consecutive stored buckets


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


def finite_time(value: Any) -> float | None:
    """A record's timestamp as a bucket keeps it: a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def bucket_width(start_step: int, end_step: int, max_points: int) -> int:
    """The smallest whole number of steps per bucket giving at most `max_points` buckets."""
    span = end_step - start_step + 1
    return max(1, -(-span // max_points))


def coalesce(pieces: Iterable[Piece], start_step: int, width: int) -> list[Piece]:
    """Merge step-ordered pieces into buckets `[start_step + k*width, ...)`.

    A piece goes to the bucket its first step falls in, so the result has at
    most ceil(span / width) buckets whatever the pieces were (rows, rollup
    nodes of any size), and empty buckets are simply absent. A piece alone in
    its bucket is passed through as it is (the pieces are not reused); so is
    a whole run of stored buckets (`PackedRun`) whose buckets each fall in a
    bucket of their own, the common case, without an object per bucket.
    """
    out: list[Piece] = []
    current_index: int | None = None
    merged: Bucket | None = None  # out[-1] once it is a copy; None while it is a piece
    for piece in pieces:
        parts: Sequence[Bucket | PackedBucket]
        if isinstance(piece, PackedRun):
            indices = [(first - start_step) // width for first in piece.first_steps]
            # Stored in step order, so distinct indices are increasing ones.
            if indices[0] != current_index and len(set(indices)) == len(indices):
                out.append(piece)
                current_index, merged = indices[-1], None
                continue
            parts = piece.split()
        else:
            parts = (piece,)
        for part in parts:
            index = (part.first_step - start_step) // width
            if index != current_index:
                out.append(part)
                current_index, merged = index, None
                continue
            if merged is None:
                # A second piece for this bucket: merge into a copy, not into the piece.
                last = out.pop()
                if isinstance(last, PackedRun):  # its last bucket shares this bucket
                    *head, last = last.split()
                    out += head
                merged = Bucket(last.first_step, last.last_step)
                merged.merge(last)
                out.append(merged)
            merged.merge(part)
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
