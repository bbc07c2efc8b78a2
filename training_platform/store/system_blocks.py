"""Reading and writing `system_blocks`: a minute of one layout's samples per row.

A batch's samples are merged into their blocks (read, merged by timestamp,
written back): a sample already stored for the same time is replaced, so a
rewritten file never doubles a sample. Only adds/flushes: the caller (the
persister) owns the transaction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

import numpy as np
from sqlalchemy import delete, select, tuple_, update
from sqlalchemy.orm import Session

from training_platform.store.bulk_write import UPSERT_CHUNK, chunks
from training_platform.store.database import dialect_insert
from training_platform.store.models import SystemBlock
from training_platform.store.system_values import FLOAT32, pack_block, unpack_block

BLOCK_SECONDS: Final = 60
_KEYS_PER_QUERY: Final = 500

# (layout id, minute) -> timestamp -> (step or -1, values in the layout's order)
Samples = dict[tuple[int, int], dict[float, tuple[int, np.ndarray]]]


def minute_of(timestamp: float) -> int:
    return math.floor(timestamp / BLOCK_SECONDS)


def merge_samples(session: Session, samples: Samples, widths: Mapping[int, int]) -> None:
    """Put `samples` into their blocks; `widths`: layout id -> its number of series."""
    stored = _read(session, samples, widths)
    params = []
    for key, new in samples.items():
        merged = stored.get(key, {})
        merged.update(new)
        params.append(_row(key, merged))
    insert = dialect_insert(session)(SystemBlock.__table__)
    upsert = insert.on_conflict_do_update(
        index_elements=["layout_id", "minute"],
        set_={"sample_count": insert.excluded.sample_count, "data": insert.excluded.data},
    )
    for chunk in chunks(params, UPSERT_CHUNK):
        session.execute(upsert, chunk)


def drop_samples(
    session: Session, times: Mapping[tuple[int, int], Iterable[float]], widths: Mapping[int, int]
) -> None:
    """Remove the samples at `times` from their blocks, where stored (a host's sample
    under another of its layouts, replaced by a newer line)."""
    stored = _read(session, times, widths)
    for key, samples in stored.items():
        gone = set(times[key])
        kept = {t: sample for t, sample in samples.items() if t not in gone}
        if len(kept) == len(samples):
            continue
        if kept:
            row = _row(key, kept)
            session.execute(
                update(SystemBlock)
                .where(SystemBlock.layout_id == key[0], SystemBlock.minute == key[1])
                .values(sample_count=row["sample_count"], data=row["data"])
                .execution_options(synchronize_session=False)
            )
        else:
            session.execute(
                delete(SystemBlock).where(
                    SystemBlock.layout_id == key[0], SystemBlock.minute == key[1]
                )
            )


def read_range(
    session: Session, layout_id: int, width: int, start: float | None, end: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(timestamps, steps with -1 for none, values) of one layout's samples in
    [start, end], in time order."""
    query = select(SystemBlock.sample_count, SystemBlock.data).where(
        SystemBlock.layout_id == layout_id
    )
    if start is not None:
        query = query.where(SystemBlock.minute >= minute_of(start))
    if end is not None:
        query = query.where(SystemBlock.minute <= minute_of(end))
    parts = [unpack_block(data, count, width) for count, data in session.execute(query)]
    if not parts:
        empty = np.empty(0)
        return empty, empty.astype(np.int64), np.empty((0, width), dtype=FLOAT32)
    timestamps = np.concatenate([part[0] for part in parts])
    steps = np.concatenate([part[1] for part in parts])
    values = np.concatenate([part[2] for part in parts])
    keep = np.ones(len(timestamps), dtype=bool)
    if start is not None:
        keep &= timestamps >= start
    if end is not None:
        keep &= timestamps <= end
    order = np.argsort(timestamps[keep], kind="stable")
    return timestamps[keep][order], steps[keep][order], values[keep][order]


def _read(
    session: Session, keys: Mapping[tuple[int, int], object], widths: Mapping[int, int]
) -> Samples:
    found: Samples = {}
    for chunk in chunks(list(keys), _KEYS_PER_QUERY):
        query = select(
            SystemBlock.layout_id, SystemBlock.minute, SystemBlock.sample_count, SystemBlock.data
        ).where(tuple_(SystemBlock.layout_id, SystemBlock.minute).in_(chunk))
        for layout_id, minute, count, data in session.execute(query):
            timestamps, steps, values = unpack_block(data, count, widths[layout_id])
            found[(layout_id, minute)] = {
                float(t): (int(step), row)
                for t, step, row in zip(timestamps, steps, values, strict=True)
            }
    return found


def _row(key: tuple[int, int], samples: dict[float, tuple[int, np.ndarray]]) -> dict[str, object]:
    times = sorted(samples)
    values = np.stack([samples[t][1] for t in times]).astype(FLOAT32)
    data = pack_block(np.array(times), np.array([samples[t][0] for t in times]), values)
    return {"layout_id": key[0], "minute": key[1], "sample_count": len(times), "data": data}
