"""Stage 2 of a series answer: the rows or stored buckets its plan names, in step order.

Exact rows come back as their numbers only (`ExactRows`), never as whole
records: their JSON columns may be large, and memory follows the answer,
not the rows. Buckets from rows are one `Bucket` per row. Stored buckets
cover the middle of the range with whole aligned buckets of the plan's level
and its ragged ends with finer levels, then raw rows (`cover`), so exactly the
asked steps count; they come from `rollup_columns` (the sealed chunks, only
the asked series) and `metric_rollups` (the rest), still packed.

Everything is read lazily, a page at a time: the merge consumes it as it comes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.orm import Session

from training_platform.history.series.buckets import Bucket, finite_time, series_values
from training_platform.history.series.plan import SeriesPlan, Tier
from training_platform.history.series.stored.codec import PackedBucket, PackedRun
from training_platform.history.series.stored.metric_rollups import WIDTHS
from training_platform.history.series.stored.rollup_columns import read_buckets
from training_platform.history.series.stored.rows import raw_rows

Piece = Bucket | PackedBucket | PackedRun  # a PackedRun: consecutive stored buckets


@dataclass
class ExactRows:
    """The steps of an exact answer: each one's step, timestamp and numbers."""

    steps: list[int]
    timestamps: list[float | None]
    values: list[dict[str, float | int]]


def read_exact_rows(session: Session, plan: SeriesPlan) -> ExactRows:
    """Steps, timestamps and numbers of the rows in the plan's range, read in pages."""
    rows = ExactRows([], [], [])
    for record in raw_rows(session, plan.job_id, plan.lo, plan.hi):
        rows.steps.append(record["step"])
        rows.timestamps.append(finite_time(record.get("timestamp")))
        rows.values.append(series_values(record))
    return rows


def read_pieces(
    session: Session, plan: SeriesPlan, fields: frozenset[str] | None
) -> Iterator[Piece]:
    """The plan's range as pieces for the merge: a `Bucket` per row, or stored buckets
    (of the sealed chunks, only the series `fields` asks for)."""
    if plan.tier is Tier.STORED_BUCKETS:
        return _stored_pieces(session, plan.job_id, plan.lo, plan.hi, plan.level, fields)
    return _row_pieces(session, plan.job_id, plan.lo, plan.hi)


def _row_pieces(session: Session, job_id: str, lo: int, hi: int) -> Iterator[Piece]:
    for record in raw_rows(session, job_id, lo, hi):
        yield Bucket.of_record(record["step"], series_values(record), record.get("timestamp"))


def _stored_pieces(
    session: Session, job_id: str, lo: int, hi: int, top: int, fields: frozenset[str] | None
) -> Iterator[Piece]:
    """The range as stored buckets of level `top`, finer at the ends."""
    for span in cover(lo, hi, WIDTHS, top):
        if span.level < 0:
            yield from _row_pieces(session, job_id, span.lo, span.hi)
        else:
            yield from read_buckets(session, job_id, span.level, span.first, span.last, fields)


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
