"""System samples as kinds of line file: `{job_id}_system.jsonl` and one file per host.

The callback's sampler writes ``{job_id}_system.jsonl``; ``training-platform
sysmon`` on another node writes ``{job_id}_system.{host}.jsonl``. Each file is
its own kind (its own committed offset in `sync_state`), so exactly-once holds
per file whatever the other hosts do; every one of them is announced and
listened to as ``system`` (`LineFileKind.family`). A host file's kind is
named by a digest of its host word: `sync_state.kind` has 32 characters,
a host name up to 64.

Storing (store/system_values.py, store/system_blocks.py): each sample's
layout (its host and series names) is found or created, the sample merged
into its layout's block of that minute (the newest line for a host and time
wins), and the minute and hour rollups of its layout widened to take its
values.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from typing import Any, Final

import numpy as np
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import JOB_ID_PATTERN
from training_platform.callbacks.wire.system_file import SYSTEM_SUFFIX
from training_platform.ingest.file_kinds import LineFileKind, StoredRows
from training_platform.ingest.system_lines import decode_system_line
from training_platform.store.bulk_write import UPSERT_CHUNK, chunks
from training_platform.store.database import dialect_insert
from training_platform.store.models import SystemLayout, SystemRollup
from training_platform.store.system_blocks import (
    Samples,
    drop_samples,
    merge_samples,
    minute_of,
)
from training_platform.store.system_values import (
    ROLLUP_WIDTHS,
    layout_digest,
    ordered_values,
    pack_stats,
    unpack_stats,
    widen,
)

FAMILY: Final = "system"
HOST_FILE_PREFIX: Final = "_system."
_HOST_WORD: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
# Names another kind of file of some job ends with: never a host's file.
_OTHER_SUFFIXES: Final = ("_metrics.jsonl", "_samples.jsonl", SYSTEM_SUFFIX)


# An existing rollup: its sample count, first time, newest step, (minimum, maximum).
SystemRollupRow = tuple[int, float, int | None, Any]
# A sample to store: layout id, timestamp, step (-1: none), values in the layout's order.
_Row = tuple[int, float, int, np.ndarray]


def system_sample_key(sample: dict[str, Any]) -> tuple[str, float]:
    return sample["host"], sample["timestamp"]


def store_system(
    session: Session,
    job_id: str,
    samples: list[dict[str, Any]],
    received_at: float,
    notes: list[str],
) -> StoredRows:
    """Upsert the batch's samples and widen their rollups."""
    del received_at  # a sample has its own time
    samples = list({system_sample_key(sample): sample for sample in samples}.values())
    for sample in samples:
        if sample["dropped"]:
            where = f"{sample['host']} at {sample['timestamp']}"
            notes.append(f"{where}: out of range, left out: {', '.join(sample['dropped'])}")
    layouts = _layouts(session, job_id, samples)
    rows: list[_Row] = []
    for sample in samples:
        layout_id, series = layouts[_layout_key(sample)]
        values = ordered_values(series, sample["values"])
        step = -1 if sample["step"] is None else sample["step"]
        rows.append((layout_id, sample["timestamp"], step, values))
    widths = {layout_id: len(series) for layout_id, series in layouts.values()}
    _drop_replaced(session, job_id, rows, widths)
    blocks: Samples = defaultdict(dict)
    for layout_id, timestamp, step, values in rows:
        blocks[(layout_id, minute_of(timestamp))][timestamp] = (step, values)
    merge_samples(session, blocks, widths)
    for width in ROLLUP_WIDTHS:
        _widen_rollups(session, rows, width)
    return StoredRows(len(rows))


def _layout_key(sample: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    return sample["host"], tuple(sorted(sample["values"]))


def _layouts(
    session: Session, job_id: str, samples: list[dict[str, Any]]
) -> dict[tuple[str, tuple[str, ...]], tuple[int, tuple[str, ...]]]:
    """(host, series) -> (layout id, series) for every layout the batch uses."""
    wanted = {_layout_key(sample) for sample in samples}
    insert = dialect_insert(session)(SystemLayout.__table__)
    found = {}
    for host, series in wanted:
        digest = layout_digest(series)
        # Another process may create the same layout: its row is the one used.
        session.execute(
            insert.values(
                job_id=job_id, host=host, digest=digest, series=list(series)
            ).on_conflict_do_nothing(index_elements=["job_id", "host", "digest"])
        )
        layout_id = session.execute(
            select(SystemLayout.id).where(
                SystemLayout.job_id == job_id,
                SystemLayout.host == host,
                SystemLayout.digest == digest,
            )
        ).scalar_one()
        found[(host, series)] = (layout_id, series)
    return found


def _drop_replaced(session: Session, job_id: str, rows: list[_Row], widths: dict[int, int]) -> None:
    """A sample of a host at a time replaces one under another layout of the host
    (a restarted run that now sees fewer GPUs): one sample per host and time."""
    layouts = session.execute(
        select(SystemLayout.id, SystemLayout.host, SystemLayout.series).where(
            SystemLayout.job_id == job_id
        )
    ).all()
    host_of = {layout_id: host for layout_id, host, _ in layouts}
    by_host: dict[str, set[int]] = defaultdict(set)
    for layout_id, host, _ in layouts:
        by_host[host].add(layout_id)
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    for layout_id, timestamp, _, _ in rows:
        for other in by_host[host_of[layout_id]] - {layout_id}:  # usually none
            times[(other, minute_of(timestamp))].append(timestamp)
    if times:
        every = {layout_id: len(series) for layout_id, _, series in layouts}
        drop_samples(session, times, {**every, **widths})


def _widen_rollups(session: Session, rows: list[_Row], width: int) -> None:
    """Merge the rows' values into their `width`-second buckets (read, widen, upsert)."""
    buckets: dict[tuple[int, int], list[_Row]] = defaultdict(list)
    for row in rows:
        buckets[(row[0], math.floor(row[1] / width))].append(row)
    existing: dict[tuple[int, int], SystemRollupRow] = {}
    for key_chunk in chunks(list(buckets), 500):
        query = select(
            SystemRollup.layout_id,
            SystemRollup.bucket,
            SystemRollup.sample_count,
            SystemRollup.first_timestamp,
            SystemRollup.last_step,
            SystemRollup.stats,
        ).where(
            SystemRollup.width == width,
            tuple_(SystemRollup.layout_id, SystemRollup.bucket).in_(key_chunk),
        )
        for layout_id, bucket, count, first, last_step, stats in session.execute(query):
            existing[(layout_id, bucket)] = (count, first, last_step, unpack_stats(stats))
    params: list[dict[str, Any]] = []
    for key, members in buckets.items():
        count, first, last_step, stats = existing.get(key, (0, math.inf, None, None))
        low, high = widen(stats, np.stack([values for _, _, _, values in members]))
        steps = [step for _, _, step, _ in members if step >= 0]
        if last_step is not None:
            steps.append(last_step)
        params.append(
            {
                "layout_id": key[0],
                "width": width,
                "bucket": key[1],
                "sample_count": count + len(members),
                "first_timestamp": min(first, *(timestamp for _, timestamp, _, _ in members)),
                "last_step": max(steps, default=None),
                "stats": pack_stats(low, high),
            }
        )
    insert = dialect_insert(session)(SystemRollup.__table__)
    upsert = insert.on_conflict_do_update(
        index_elements=["layout_id", "width", "bucket"],
        set_={
            name: insert.excluded[name]
            for name in ("sample_count", "first_timestamp", "last_step", "stats")
        },
    )
    for chunk in chunks(params, UPSERT_CHUNK):
        session.execute(upsert, chunk)


SYSTEM: Final = LineFileKind(
    name=FAMILY,
    suffix=SYSTEM_SUFFIX,
    decode=decode_system_line,
    store=store_system,
    key=system_sample_key,
    required=False,  # a run may sample nothing (system_metrics_interval=0)
)


def host_file_kind(host_word: str) -> LineFileKind:
    """The kind of ``{job_id}_system.{host_word}.jsonl`` (sysmon's file for one host)."""
    digest = hashlib.sha256(host_word.encode()).hexdigest()[:16]
    return LineFileKind(
        name=f"{FAMILY}.{digest}",
        suffix=f"{HOST_FILE_PREFIX}{host_word}.jsonl",
        decode=decode_system_line,
        store=store_system,
        key=system_sample_key,
        required=False,
    )


def host_word_of(name: str, job_id: str) -> str | None:
    """The host word of `job_id`'s host file called `name`, else None.

    Another job's file can start the same way (the job ``a_system.b`` has
    ``a_system.b_metrics.jsonl``): names ending like another kind's file are
    theirs, and the job id must be exactly `job_id`.
    """
    prefix = job_id + HOST_FILE_PREFIX
    if not name.startswith(prefix) or not name.endswith(".jsonl"):
        return None
    if name.endswith(_OTHER_SUFFIXES):
        return None
    word = name[len(prefix) : -len(".jsonl")]
    return word if _HOST_WORD.fullmatch(word) else None


def job_of_host_file(name: str) -> str | None:
    """The job whose host file `name` is (``{job_id}_system.{host}.jsonl``), else None."""
    if not name.endswith(".jsonl") or name.endswith(_OTHER_SUFFIXES):
        return None
    job_id, found, word = name[: -len(".jsonl")].rpartition(HOST_FILE_PREFIX)
    if not found or not JOB_ID_PATTERN.fullmatch(job_id) or not _HOST_WORD.fullmatch(word):
        return None
    return job_id
