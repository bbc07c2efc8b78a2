"""A bucket: some steps summarised per series (min, max, sum and counts), and how two merge.

Below every stage of the series read path (`series/__init__.py`) and below
the write side (`stored/refresh.py`): what rows become, what is stored, what
is merged and what is shaped are all these buckets.

A series is one number per step, named ``group.field`` (``loss.actor_loss``,
``timing.rollout``, ``extra.actor/entropy``). A bucket keeps, per series, the
minimum, the maximum, the sum and count of the finite values (hence the
mean) and how many values were NaN or infinite. So a one-step spike is never
averaged away: it is the bucket's max, drawn as the top of the band (what
W&B draws in its full-fidelity mode), and a NaN step still counts in
`nonfinite`, never dropped. Zoomed in far enough, every bucket holds one step
and the answer is the raw data.

Buckets merge exactly (min of mins, max of maxes, sums of sums), which is what
lets the write side precompute them once at ingestion and a query answer a
1M-step history from ~2,000 stored buckets instead of 1M rows. How buckets
are stored is `stored/codec.py`; how they are answered as JSON, `shape.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final, Protocol

from training_platform.callbacks.wire.schema import FREE_GROUPS, GROUP_FIELDS, NONFINITE_VALUES

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


class Summary(Protocol):
    """What `Bucket.merge` reads of another bucket: a `Bucket`, or a stored one
    still packed (`stored.codec.PackedBucket`, which unpacks its `stats`)."""

    @property
    def first_step(self) -> int: ...
    @property
    def last_step(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def stats(self) -> Mapping[str, Stats]: ...
    @property
    def first_timestamp(self) -> float | None: ...


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

    def merge(self, other: Summary) -> None:
        first = other.first_step
        if first < self.first_step or (first == self.first_step and self.first_timestamp is None):
            self.first_timestamp = other.first_timestamp
        self.first_step = min(self.first_step, other.first_step)
        self.last_step = max(self.last_step, other.last_step)
        self.rows += other.rows
        merge_stats(self.stats, other.stats)


def finite_time(value: Any) -> float | None:
    """A record's timestamp as a bucket keeps it: a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
