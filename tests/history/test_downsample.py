"""Downsampling: extrema kept, point budget respected, exact at full zoom; rollups stay true.

The pure algorithm is checked against brute force; the stored rollups (both
databases) against a rebuild from the rows and against the rows themselves,
through random appends and rewrites.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.records import build_record, normalize_record
from training_platform.history.series.answer import downsampled_history
from training_platform.history.series.buckets import Bucket, series_values
from training_platform.history.series.merge import coalesce
from training_platform.history.series.plan import RAW_BUCKETING_ROWS, bucket_width
from training_platform.history.series.read import cover
from training_platform.history.series.shape import buckets_to_json
from training_platform.history.series.stored.codec import decode_stats, encode_stats
from training_platform.history.series.stored.metric_rollups import WIDTHS
from training_platform.history.series.stored.refresh import (
    _bucket_of_rows,
    rebuild_rollups,
    refresh_rollups,
)
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.store.metric_rows import record_to_params
from training_platform.store.models import Job, MetricRollup

JOB = "ds"


def _record(step: int, rng: random.Random, *, nan: bool = False) -> dict[str, Any]:
    loss = math.nan if nan else 2.0 + math.sin(step / 50) + rng.gauss(0, 0.1)
    return build_record(
        step,
        {
            "loss": {"actor_loss": loss, "total_loss": 3.0 - step * 1e-4},
            "reward": {"mean": rng.random(), "min": -rng.random(), "max": 1 + rng.random()},
            "timing": {"rollout": 1.0 + rng.random()},
            "extra": {"actor/entropy": rng.random()},
        },
        timestamp=1.7e9 + step,
    )


def _summary(values: list[float | int]) -> tuple[Any, ...]:
    finite = [v for v in values if math.isfinite(v)]
    nonfinite = len(values) - len(finite)
    if not finite:
        return None, None, None, nonfinite
    return min(finite), max(finite), sum(finite) / len(finite), nonfinite


def _check_buckets(body: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Every bucket is exactly the summary of the stored rows in its step range, and
    its timestamp that of the record at its first step (the buckets keep it)."""
    steps, last_steps = body["steps"], body["last_steps"]
    if "timestamps" in body:  # a query's answer (the pure algorithm's tests build none)
        times = {r["step"]: r["timestamp"] for r in records}
        assert body["timestamps"] == [times[step] for step in steps]
    assert all(a <= b for a, b in zip(steps, last_steps, strict=True))
    assert all(b < a for a, b in zip(steps[1:], last_steps, strict=False)), "buckets overlap"
    rows = sorted(
        (r["step"], series_values(r))
        for r in records
        if body["start_step"] <= r["step"] <= body["end_step"]
    )
    row_steps = [step for step, _ in rows]
    covered = 0
    for i, (lo, hi) in enumerate(zip(steps, last_steps, strict=True)):
        inside = rows[bisect.bisect_left(row_steps, lo) : bisect.bisect_right(row_steps, hi)]
        covered += len(inside)
        for key, arrays in body["series"].items():
            low, high, mean, nonfinite = _summary([v[key] for _, v in inside if key in v])
            assert arrays["min"][i] == low and arrays["max"][i] == high, (key, lo, hi)
            assert arrays["nonfinite"][i] == nonfinite
            if mean is None:
                assert arrays["mean"][i] is None
            else:
                assert arrays["mean"][i] == pytest.approx(mean, rel=1e-9, abs=1e-12)
    assert covered == len(rows), "rows outside every bucket"


# --- the pure algorithm ------------------------------------------------------------


def test_every_spike_survives_as_its_buckets_max() -> None:
    rng = random.Random(1)
    records = [_record(step, rng) for step in range(10_000)]
    records[4321]["loss"]["actor_loss"] = 1e6  # a one-step spike
    records[777]["loss"]["actor_loss"] = -1e6  # and a dip
    width = bucket_width(0, 9_999, 200)

    buckets = coalesce((Bucket.of_record(r["step"], series_values(r)) for r in records), 0, width)
    body = {"start_step": 0, "end_step": 9_999, **buckets_to_json(buckets, None)}

    assert len(buckets) <= 200
    loss = body["series"]["loss.actor_loss"]
    assert max(loss["max"]) == 1e6 and min(loss["min"]) == -1e6
    _check_buckets(body, records)


def test_nan_steps_are_counted_not_dropped() -> None:
    rng = random.Random(2)
    records = [_record(step, rng, nan=step in (10, 11, 500)) for step in range(1_000)]
    buckets = coalesce((Bucket.of_record(r["step"], series_values(r)) for r in records), 0, 100)

    nonfinite = buckets_to_json(buckets, None)["series"]["loss.actor_loss"]["nonfinite"]

    assert nonfinite[0] == 2 and nonfinite[5] == 1 and sum(nonfinite) == 3


def _irregular_record(step: int, rng: random.Random) -> dict[str, Any]:
    """Records as odd as ingestion may see: fields come and go, reorder, and are not numbers."""
    record: dict[str, Any] = {"step": step}
    choice = rng.random()
    loss: dict[str, Any] = {"actor_loss": rng.gauss(0, 1), "critic_loss": rng.random()}
    if choice < 0.1:
        loss = dict(reversed(list(loss.items())))  # same fields, another order
    elif choice < 0.2:
        loss["total_loss"] = rng.choice([math.nan, math.inf, -math.inf, 1e308, 1e308])
    elif choice < 0.25:
        del loss["actor_loss"]
    elif choice < 0.3:  # as many fields, not the same ones
        loss = {"critic_loss": rng.random(), "total_loss": rng.gauss(0, 1)}
    if rng.random() < 0.9:
        record["loss"] = loss
    extra: dict[str, Any] = {"entropy": rng.random(), "count": rng.randrange(10)}
    if rng.random() < 0.2:
        extra["entropy"] = rng.choice([True, "NaN", "-Infinity", "text", None, [1.0]])
    record["extra"] = extra
    if rng.random() < 0.3:
        # `other` may even repeat a regular series (a hand-written line can).
        record["other"] = {"custom": {"a": rng.random(), "flag": True}, "loss": {"actor_loss": 1.0}}
    return record


def _assert_same_bucket(built: Bucket, expected: Bucket) -> None:
    assert (built.first_step, built.last_step, built.rows) == (
        expected.first_step,
        expected.last_step,
        expected.rows,
    )
    assert built.stats.keys() == expected.stats.keys()
    for key, entry in expected.stats.items():
        assert repr(built.stats[key]) == repr(entry), key  # repr: NaN and -0.0 compare exactly


def _random_pairs(seed: int) -> list[tuple[int, dict[str, Any]]]:
    rng = random.Random(seed)
    size = rng.choice([1, 2, 5, 32])
    uniform = seed % 2 == 0
    return [
        (
            step,
            _record(step, rng, nan=rng.random() < 0.1) if uniform else _irregular_record(step, rng),
        )
        for step in range(seed * 32, seed * 32 + size)
    ]


def _one_by_one(pairs: list[tuple[int, dict[str, Any]]]) -> Bucket:
    bucket = Bucket(pairs[0][0], pairs[0][0])
    for step, record in pairs:
        bucket.add(step, series_values(record))
    return bucket


@pytest.mark.parametrize("seed", range(40))
def test_bucket_of_records_equals_adding_them_one_by_one(seed: int) -> None:
    pairs = _random_pairs(seed)
    _assert_same_bucket(Bucket.of_records(pairs), _one_by_one(pairs))


def test_records_with_as_many_but_other_fields_are_summed_per_field() -> None:
    pairs = [
        (1, {"step": 1, "loss": {"actor_loss": 1.0, "critic_loss": 2.0}, "timing": {"a": 1.0}}),
        (2, {"step": 2, "loss": {"critic_loss": 3.0, "total_loss": 4.0}, "timing": {"a": 2.0}}),
        (3, {"step": 3, "loss": {"critic_loss": 5.0, "actor_loss": 6.0}, "timing": {"b": 3.0}}),
    ]
    built = Bucket.of_records(pairs)
    _assert_same_bucket(built, _one_by_one(pairs))
    assert built.stats["loss.critic_loss"] == [2.0, 5.0, 10.0, 3, 0]


@pytest.mark.parametrize("seed", range(40))
def test_a_bucket_built_from_the_written_rows_equals_the_records(seed: int) -> None:
    records = [normalize_record(record) for _, record in _random_pairs(seed)]
    rows = [record_to_params(JOB, record, 1.0) for record in records]

    built = _bucket_of_rows(rows, records)

    _assert_same_bucket(built, _one_by_one([(r["step"], r) for r in records]))


@pytest.mark.parametrize("span", [1, 7, 999, 1_000, 1_001, 123_457, 10**9 + 7])
@pytest.mark.parametrize("max_points", [2, 3, 1_000, 2_000])
def test_the_point_budget_holds_for_any_span(span: int, max_points: int) -> None:
    width = bucket_width(5, 5 + span - 1, max_points)
    assert math.ceil(span / width) <= max_points
    assert width == 1 or math.ceil(span / (width - 1)) > max_points  # and it is the smallest


def test_cover_splits_a_range_exactly_into_aligned_runs() -> None:
    rng = random.Random(3)
    for _ in range(300):
        lo = rng.randrange(0, 3_000_000)
        hi = lo + rng.randrange(0, 2_000_000)
        top = rng.randrange(len(WIDTHS))
        spans = list(cover(lo, hi, WIDTHS, top))
        assert spans[0].lo == lo and spans[-1].hi == hi
        for before, after in itertools.pairwise(spans):
            assert after.lo == before.hi + 1
        for span in spans:
            if span.level < 0:
                assert span.hi - span.lo + 1 < 2 * WIDTHS[0]
            else:
                width = WIDTHS[span.level]
                assert span.lo == span.first * width and span.hi == (span.last + 1) * width - 1
                assert span.level <= top


def test_stored_stats_round_trip_with_empty_and_overflowed_series() -> None:
    stats = {
        "loss.actor_loss": [-1.5, 2.25, 0.75, 3, 1],
        "extra.only/nan": [None, None, None, 0, 4],
        "extra.huge": [1e308, 1e308, math.inf, 2, 0],
        'extra.odd "name"\n': [1, 1, 1, 1, 0],
    }
    assert decode_stats(encode_stats(stats)) == stats


# --- stored rollups and the history query (SQLite and PostgreSQL) ---------------------


@pytest.fixture
def job(session_factory: sessionmaker[Session]) -> str:
    with session_factory() as session:
        session.add(Job(job_id=JOB, created_at=0.0))
        session.commit()
    return JOB


def _ingest(factory: sessionmaker[Session], records: list[dict[str, Any]]) -> None:
    """What the persister does per batch: rows, then their buckets, in one transaction."""
    with factory() as session:
        upsert_metrics(session, job_id=JOB, records=records, received_at=1.0)
        refresh_rollups(session, job_id=JOB, records=records)
        session.commit()


def _stored(factory: sessionmaker[Session]) -> dict[tuple[int, int], tuple[Any, ...]]:
    with factory() as session:
        rows = session.scalars(select(MetricRollup).where(MetricRollup.job_id == JOB))
        return {
            (r.level, r.bucket): (
                r.first_step,
                r.last_step,
                r.row_count,
                _rounded(decode_stats(r.stats)),
            )
            for r in rows
        }


def _rounded(stats: dict[str, list[Any]]) -> dict[str, list[Any]]:
    # Sums are added in a different order by refresh and rebuild: equal up to rounding.
    return {k: [*v[:2], None if v[2] is None else round(v[2], 6), *v[3:]] for k, v in stats.items()}


def _batches(records: list[dict[str, Any]], rng: random.Random) -> Iterator[list[dict[str, Any]]]:
    start = 0
    while start < len(records):
        size = rng.choice([1, 3, 40, 700])
        yield records[start : start + size]
        start += size


def test_refreshed_rollups_equal_a_rebuild_after_appends_and_rewrites(
    session_factory: sessionmaker[Session], job: str
) -> None:
    rng = random.Random(4)
    records = [_record(step, rng, nan=step % 997 == 5) for step in range(0, 6_000, 3)]
    for batch in _batches(records, rng):
        _ingest(session_factory, batch)
    # A run resumed from a checkpoint writes earlier steps again, with new values.
    rewritten = [_record(step, rng) for step in range(2_400, 2_700)]
    _ingest(session_factory, rewritten)
    incremental = _stored(session_factory)

    with session_factory() as session:
        read = rebuild_rollups(session, job_id=JOB)
        session.commit()

    assert read == len({r["step"] for r in records + rewritten})
    assert _stored(session_factory) == incremental
    assert {level for level, _ in incremental} == set(range(len(WIDTHS)))


def test_a_long_run_comes_back_as_exact_bucket_summaries(
    session_factory: sessionmaker[Session], job: str
) -> None:
    rng = random.Random(5)
    records = [_record(step, rng, nan=step == 12_345) for step in range(30_000)]
    records[20_001]["loss"]["actor_loss"] = 99.0  # a spike inside a stored bucket
    for start in range(0, len(records), 5_000):
        _ingest(session_factory, records[start : start + 5_000])

    with session_factory() as session:
        whole = downsampled_history(
            session, job_id=JOB, start_step=None, end_step=None, max_points=500, fields=None
        )
        ragged = downsampled_history(
            session, job_id=JOB, start_step=1_003, end_step=29_989, max_points=300, fields=None
        )

    assert whole["downsampled"] and whole["count"] <= 500
    assert max(whole["series"]["loss.actor_loss"]["max"]) == 99.0
    assert sum(whole["series"]["loss.actor_loss"]["nonfinite"]) == 1
    _check_buckets(whole, records)
    assert (ragged["start_step"], ragged["end_step"]) == (1_003, 29_989)
    assert ragged["steps"][0] == 1_003 and ragged["last_steps"][-1] == 29_989
    assert ragged["count"] <= 300
    _check_buckets(ragged, records)


def test_a_range_with_few_rows_is_exact(session_factory: sessionmaker[Session], job: str) -> None:
    rng = random.Random(6)
    records = [_record(step, rng, nan=step == 40) for step in range(0, 200, 2)]
    _ingest(session_factory, records)

    with session_factory() as session:
        body = downsampled_history(
            session, job_id=JOB, start_step=30, end_step=60, max_points=16, fields=None
        )

    assert body["downsampled"] is False and body["steps"] == list(range(30, 61, 2))
    values = body["series"]["loss.actor_loss"]["values"]
    assert values[5] == "NaN"
    assert values[0] == records[15]["loss"]["actor_loss"]


def test_mid_sized_ranges_are_bucketed_from_rows_and_fields_filter(
    session_factory: sessionmaker[Session], job: str
) -> None:
    rng = random.Random(7)
    records = [_record(step, rng) for step in range(RAW_BUCKETING_ROWS - 10)]
    _ingest(session_factory, records)

    with session_factory() as session:
        body = downsampled_history(
            session,
            job_id=JOB,
            start_step=None,
            end_step=None,
            max_points=100,
            fields=frozenset({"loss", "extra.actor/entropy"}),
        )

    assert body["downsampled"] and body["count"] <= 100
    assert set(body["series"]) == {"loss.actor_loss", "loss.total_loss", "extra.actor/entropy"}
    _check_buckets(body, records)


def test_without_maintained_rollups_the_rows_still_answer(
    session_factory: sessionmaker[Session], job: str
) -> None:
    rng = random.Random(8)
    records = [_record(step, rng) for step in range(RAW_BUCKETING_ROWS + 500)]
    with session_factory() as session:  # rows only, as before rollups existed
        upsert_metrics(session, job_id=JOB, records=records, received_at=1.0)
        session.commit()

    with session_factory() as session:
        body = downsampled_history(
            session, job_id=JOB, start_step=None, end_step=None, max_points=64, fields=None
        )

    assert body["downsampled"] and body["count"] <= 64
    _check_buckets(body, records)


@pytest.mark.parametrize("max_points", [5_000, 1_000, 100])
def test_bucket_steps_says_how_far_apart_the_returned_points_are(
    session_factory: sessionmaker[Session], job: str, max_points: int
) -> None:
    """Stored buckets are never split: a width of 3 asked of a 12,000-step run is
    answered by 32-step buckets, and `bucket_steps` said 3 (issue 23)."""
    rng = random.Random(6)
    records = [_record(step, rng) for step in range(12_000)]
    for start in range(0, len(records), 4_000):
        _ingest(session_factory, records[start : start + 4_000])

    with session_factory() as session:
        body = downsampled_history(
            session, job_id=JOB, start_step=7, end_step=None, max_points=max_points, fields=None
        )

    assert body["downsampled"] and body["count"] <= max_points
    width = body["bucket_steps"]
    starts = body["steps"]
    # Every point but the range's ragged first one starts on the stored buckets'
    # grid (multiples of the width), and none spans more than the width.
    assert starts[0] == 7 and all(step % width == 0 for step in starts[1:])
    assert all(last - first < width for first, last in zip(starts, body["last_steps"], strict=True))
    assert {b - a for a, b in itertools.pairwise(starts[1:])} == {width}
    assert width in WIDTHS and width >= bucket_width(7, 11_999, max_points)
    assert body["count"] == -(-12_000 // width) - 7 // width  # the grid is full: no step missing
    _check_buckets(body, records)
