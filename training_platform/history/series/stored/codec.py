"""The stored form of a bucket's stats (`metric_rollups.stats`): encoded and decoded here only.

A blob is the series names as a JSON list (``["loss.actor_loss", ...]``),
one NUL byte, then five little-endian float64 per series, in the order of the
names: min, max, sum, finite count, non-finite count (`buckets.Stats`'
order). NaN in min, max or sum stands for "no finite value" (they never hold
a non-finite value otherwise, but for a sum that overflowed, which stays inf);
the counts are whole numbers. JSON text never contains a raw NUL byte, so the
first NUL ends the header.

Binary rather than JSON because reading a long run's ~2,000 buckets is the
hot path of its history, and parsing their decimal floats took most of it;
`array` unpacks the float64s at C speed. Buckets read together that share a
header share one decoded name list (`PackedBucket.keys`), which is how
`shape.buckets_to_json` recognises runs of them and slices each series
out of all their payloads at once.

The stages read stored buckets through it (they come back still packed, as
`PackedBucket` and `PackedRun`); the write side (`refresh.py`) encodes them.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from training_platform.history.series.buckets import Stats


def encode_stats(stats: Mapping[str, Stats]) -> bytes:
    """`stats` as a blob (see the module docstring)."""
    keys = list(stats)
    values = array("d")
    for key in keys:
        low, high, total, finite, nonfinite = stats[key]
        values.extend(
            (
                math.nan if low is None else low,
                math.nan if high is None else high,
                math.nan if total is None else total,
                finite,
                nonfinite,
            )
        )
    if sys.byteorder != "little":
        values.byteswap()
    return orjson.dumps(keys) + b"\0" + values.tobytes()


def decode_stats(blob: bytes) -> dict[str, Stats]:
    """The `Stats` per series of a blob (the inverse of `encode_stats`)."""
    header, payload = split_stats(blob)
    return unpack_stats(decode_keys(header), payload)


def split_stats(blob: bytes) -> tuple[bytes, bytes]:
    """A blob's header (its JSON name list, undecoded) and its packed float64s."""
    blob = bytes(blob)  # memoryview from some drivers
    split = blob.index(b"\0")
    return blob[:split], blob[split + 1 :]


def decode_keys(header: bytes) -> list[str]:
    """The series names of a blob's header."""
    keys: list[str] = orjson.loads(header)
    return keys


def unpack_floats(payload: bytes) -> array[float]:
    """Little-endian float64s (the packed part of a stored bucket) as an array."""
    values = array("d")
    values.frombytes(payload)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def unpack_stats(keys: Sequence[str], payload: bytes) -> dict[str, Stats]:
    """Five float64 per series (NaN: no finite value) as `Stats` (see `encode_stats`)."""
    flat = unpack_floats(payload).tolist()
    stats: dict[str, Stats] = {}
    for i, key in enumerate(keys):
        low, high, total, finite, nonfinite = flat[5 * i : 5 * i + 5]
        if finite:
            stats[key] = [low, high, total, int(finite), int(nonfinite)]
        else:
            stats[key] = [None, None, None, 0, int(nonfinite)]
    return stats


@dataclass(slots=True)
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
    first_timestamp: float | None = None  # the record's at `first_step`

    @property
    def stats(self) -> dict[str, Stats]:
        return unpack_stats(self.keys, self.payload)


@dataclass(slots=True)
class PackedRun:
    """Consecutive stored buckets read together with the same series: per bucket its
    index, steps, row count and first timestamp, and all their payloads joined.

    What `read_buckets` yields: a million-step run's answer is ~2,000 buckets,
    and most of them pass from the database to the columns untouched, so they
    travel as one object rather than one each (`split` gives the buckets when
    one must be merged with another piece).
    """

    buckets: list[int]  # their indexes at their level (`metric_rollups.bucket`)
    first_steps: list[int]
    last_steps: list[int]
    rows: list[int]
    first_timestamps: list[float | None]
    keys: list[str]
    payload: bytes

    def __len__(self) -> int:
        return len(self.first_steps)

    def split(self) -> list[PackedBucket]:
        size = 40 * len(self.keys)  # five float64 per series
        return [
            PackedBucket(first, last, rows, self.keys, self.payload[i * size : (i + 1) * size], ts)
            for i, (first, last, rows, ts) in enumerate(
                zip(
                    self.first_steps, self.last_steps, self.rows, self.first_timestamps, strict=True
                )
            )
        ]
