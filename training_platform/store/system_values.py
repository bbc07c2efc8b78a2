"""How system samples are laid out in the database (store/models.py, System*).

A host reports the same few dozen series every few seconds for days, so a
sample is stored as its values only, float32 in the order of its layout's
series names (stored once per host and set of series), a minute of samples
to a block compressed together (`pack_block`). float32 keeps 7 significant
digits, more than any sensor here reads. NaN marks a series the host did
not report in that sample.

Rollups (`system_rollups`) summarise `ROLLUP_WIDTHS` seconds of one layout:
per series the smallest and largest value, float32 (NaN where the bucket has
no value), so spikes survive any downsampling. numpy's `fmin`/`fmax` skip
NaN, which is what widening a bucket needs.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import orjson

ROLLUP_WIDTHS: Final = (60, 3600)  # seconds: a minute, an hour
FLOAT32: Final = np.dtype("<f4")


def layout_digest(series: Sequence[str]) -> str:
    """The layout's key among a host's layouts: a digest of its series names."""
    return hashlib.sha256(orjson.dumps(list(series))).hexdigest()


def ordered_values(series: Sequence[str], values: dict[str, float]) -> np.ndarray:
    """`values` in the order of `series`, float32, NaN where absent."""
    return np.array([values.get(name, math.nan) for name in series], dtype=FLOAT32)


def pack_block(timestamps: np.ndarray, steps: np.ndarray, values: np.ndarray) -> bytes:
    """A block of samples (times in order, steps with -1 for none, a (samples, series)
    float32 array) as one compressed blob.

    Laid out column by column, each column's bytes shuffled (every value's
    first byte, then every second byte, ...): a series that hardly moves
    becomes long runs of equal bytes, which zlib all but removes.
    """
    parts = (
        timestamps.astype("<f8"),
        steps.astype("<i8"),
        np.ascontiguousarray(values.astype(FLOAT32).T),
    )
    return zlib.compress(b"".join(_shuffled(part) for part in parts), 6)


def unpack_block(data: bytes, count: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(timestamps, steps, values) of `count` samples of `width` series (`pack_block`)."""
    raw = zlib.decompress(data)
    times_end, steps_end = 8 * count, 16 * count
    timestamps = _unshuffled(raw[:times_end], "<f8", count)
    steps = _unshuffled(raw[times_end:steps_end], "<i8", count)
    values = _unshuffled(raw[steps_end:], FLOAT32, count * width).reshape(width, count).T
    return timestamps, steps, values


def _shuffled(array: np.ndarray) -> bytes:
    size = array.dtype.itemsize
    return np.frombuffer(array.tobytes(), dtype=np.uint8).reshape(-1, size).T.tobytes()


def _unshuffled(data: bytes, dtype: Any, count: int) -> np.ndarray:
    size = np.dtype(dtype).itemsize
    planes = np.frombuffer(data, dtype=np.uint8).reshape(size, count)
    values: np.ndarray = np.ascontiguousarray(planes.T).view(dtype).reshape(count)
    return values


def pack_stats(low: np.ndarray, high: np.ndarray) -> bytes:
    """A rollup's stats: every series' minimum, then every series' maximum."""
    return np.concatenate([low, high]).astype(FLOAT32).tobytes()


def unpack_stats(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    values = np.frombuffer(data, dtype=FLOAT32)
    half = len(values) // 2
    return values[:half], values[half:]


def widen(
    stats: tuple[np.ndarray, np.ndarray] | None, stacked: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`stats` (a bucket's minimum and maximum per series, or None for a new bucket)
    widened by samples of the same layout (a (samples, series) float32 array); a NaN
    (not reported) changes nothing."""
    with np.errstate(invalid="ignore"):  # a series no sample has stays NaN, quietly
        low, high = np.fmin.reduce(stacked, axis=0), np.fmax.reduce(stacked, axis=0)
    if stats is None:
        return low, high
    return np.fmin(stats[0], low), np.fmax(stats[1], high)
