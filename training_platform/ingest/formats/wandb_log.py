"""A W&B offline run (`WANDB_MODE=offline`: `wandb/offline-run-*/run-<id>.wandb`) read
incrementally by byte offset, as a job's metrics.

The file is W&B's transaction log: a 7-byte header (`:W&B`, magic 0xBEE1, a
version), then LevelDB's log format, 32 KiB blocks of chunks, each
``crc32 (u32 LE) | length (u16 LE) | type (u8) | data``, a record being one
FULL chunk or FIRST, MIDDLE..., LAST ones; a block's last bytes too short for
a chunk header are padding. Its checksum is zlib's CRC-32 of the type byte
and the data. The W&B SDK (0.31) no longer ships a Python reader of it (only
its Go `wandb-core` reads it), so the framing is read here, by offset, with
the same promises as the TFRecord reader (whole records only, a half-written
one held back, a bad checksum skipped and counted); each record's bytes are
W&B's own protobuf `Record`, decoded by the SDK's generated messages
(`wandb.proto.wandb_internal_pb2`), never by hand.

Records used: `history` rows (their `_step`, their numbers mapped with the
trainers' key table, nested keys joined with `.`; `_runtime`, `_timestamp`
and `_step` are not metrics), `run` (its name, project, tags and config),
`config` updates (the config) and `exit` (`run.finish()`: kept with the run
as `ended`, whose exit code makes the job completed or failed, see
`exit_status`). Everything else (system stats, summaries, files, telemetry)
is passed over.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

from training_platform.callbacks.wire.records import build_record
from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import merged_metrics_kind
from training_platform.ingest.line_scanner import (
    MAX_ERRORS,
    ReadAt,
    ReadBatch,
    ReadPosition,
    fingerprint,
    start_of,
)

FILE_HEADER: Final = 7  # ":W&B", magic (u16), version (u8)
BLOCK: Final = 32768
CHUNK_HEADER: Final = 7  # crc (u32), length (u16), type (u8)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_TYPE_CRC: Final = {kind: zlib.crc32(bytes((kind,))) for kind in (FULL, FIRST, MIDDLE, LAST)}
NOT_METRICS: Final = frozenset({"_step", "_runtime", "_timestamp"})
MAX_RECORD_BYTES: Final = 256 << 20  # no W&B record is that large: past it, skipped
RUN_FILE_PREFIX: Final = "run-"
RUN_FILE_SUFFIX: Final = ".wandb"


def is_run_file(name: str) -> bool:
    return name.startswith(RUN_FILE_PREFIX) and name.endswith(RUN_FILE_SUFFIX)


@dataclass
class Framed:
    records: list[bytes] = field(default_factory=list)
    offset: int = 0  # after the last whole record read
    at_eof: bool = True
    corrupt: list[str] = field(default_factory=list)


def read_framed(read_at: ReadAt, size: int, offset: int, max_bytes: int) -> Framed:
    """The whole records from `offset` (a record's first chunk, or 0), about `max_bytes`."""
    framed = Framed(offset=max(offset, FILE_HEADER))
    if size <= FILE_HEADER:
        framed.offset = offset
        return framed
    position = framed.offset
    end = min(size, position + max(max_bytes, BLOCK))
    data = read_at(position, end - position)
    pieces: list[bytes] = []
    cursor = position
    while cursor + CHUNK_HEADER <= position + len(data):
        left = BLOCK - cursor % BLOCK
        if left < CHUNK_HEADER:  # the block's padding
            cursor += left
            continue
        start = cursor - position
        crc, length, kind = struct.unpack_from("<IHB", data, start)
        if kind == 0 and length == 0:
            break  # zeros: not written yet (or the padding of a block never filled)
        chunk_end = start + CHUNK_HEADER + length
        if chunk_end > len(data):
            break  # half written, or past this read: from the record's start next time
        chunk = data[start + CHUNK_HEADER : chunk_end]
        cursor += CHUNK_HEADER + length
        if kind not in _TYPE_CRC or zlib.crc32(chunk, _TYPE_CRC[kind]) != crc:
            framed.corrupt.append(f"offset {cursor - CHUNK_HEADER - length}: bad chunk checksum")
            pieces = []
            framed.offset = cursor
            continue
        if kind in (FULL, FIRST):
            pieces = [chunk]
        else:
            pieces.append(chunk)
        if kind in (FULL, LAST):
            framed.records.append(b"".join(pieces))
            pieces = []
            framed.offset = cursor
            if cursor - position >= max_bytes:
                framed.at_eof = cursor >= size
                return framed
    framed.at_eof = end >= size
    if not framed.records and not framed.corrupt and not framed.at_eof:
        # One record longer than the window: read a wider one, or the caller would
        # ask for the same bytes again and again. Past MAX_RECORD_BYTES it is skipped.
        if max_bytes < MAX_RECORD_BYTES:
            return read_framed(read_at, size, offset, max_bytes * 4)
        framed.corrupt.append(f"offset {framed.offset}: a record over {MAX_RECORD_BYTES} bytes")
        framed.offset = _next_block(framed.offset)
    return framed


def _next_block(offset: int) -> int:
    return (offset // BLOCK + 1) * BLOCK


def scan_run(read_at: ReadAt, size: int, position: ReadPosition, max_bytes: int) -> ReadBatch:
    """The history rows after `position` as records, and what the run says of itself."""
    try:  # the `wandb` extra: only W&B runs need it
        from wandb.proto import wandb_internal_pb2
    except ImportError as exc:
        raise MetricsSourceError(
            f"reading W&B runs needs the SDK's messages ({exc}): pip install wandb"
        ) from None
    head, offset, reset = start_of(read_at, size, position)
    if head[:4] not in (b"", b":W&B"[: len(head)]):
        raise MetricsSourceError("not a W&B transaction log (no ':W&B' header)")
    framed = read_framed(read_at, size, offset, max_bytes)
    decoded = _Decoded()
    for data in framed.records:
        try:
            decoded.add(wandb_internal_pb2.Record.FromString(data))  # type: ignore[attr-defined]
        except Exception as exc:  # a record that is not W&B's: counted, never blocking
            decoded.errors.append(f"not a W&B record ({exc})")
    problems = [*framed.corrupt, *decoded.errors]
    return ReadBatch(
        records=decoded.records,
        position=ReadPosition(framed.offset, fingerprint(head)),
        malformed=len(problems),
        reset=reset,
        at_eof=framed.at_eof,
        file_size=size,
        errors=problems[:MAX_ERRORS],
        about=decoded.about or None,
    )


class _Decoded:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.about: dict[str, Any] = {}
        self.errors: list[str] = []

    def add(self, record: Any) -> None:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            self._history(record.history)
        elif kind == "run":
            run = record.run
            if run.display_name:
                self.about["name"] = run.display_name
            if run.project:
                self.about["project"] = run.project
            if run.tags:
                self.about["tags"] = list(run.tags)
            self._config(run.config.update)
        elif kind == "config":
            self._config(record.config.update)
        elif kind == "exit":  # `run.finish()`: the run's end, with its exit code
            self.about["ended"] = {
                "exit_code": int(record.exit.exit_code),
                "runtime": int(record.exit.runtime),
            }

    def _history(self, history: Any) -> None:
        values: dict[str, float] = {}
        step = history.step.num if history.HasField("step") else None
        stamp = None
        for item in history.item:
            key = item.key or ".".join(item.nested_key)
            value = _number(item.value_json)
            if key == "_step" and value is not None:
                step = int(value)
            elif key == "_timestamp":
                stamp = value
            elif key not in NOT_METRICS and value is not None:
                values[key] = value
        if step is None or step < 0:
            self.errors.append("history row without a step")
            return
        self.records.append(build_record(step, values, timestamp=stamp))

    def _config(self, updates: Any) -> None:
        config = self.about.setdefault("config", {})
        for item in updates:
            key = item.key or ".".join(item.nested_key)
            if key.startswith("_wandb"):
                continue
            try:
                value = json.loads(item.value_json)
            except ValueError:
                value = item.value_json
            # W&B wraps config values as {"value": ..., "desc": ...} in some writers.
            config[key] = value["value"] if isinstance(value, dict) and "value" in value else value


def _number(text: str) -> float | None:
    try:
        value = json.loads(text)
    except ValueError:
        lowered = text.strip().lower()
        return {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf}.get(lowered)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def run_file_kind(name: str) -> LineFileKind:
    """The kind of the run's transaction log `name` (in the run directory)."""
    return merged_metrics_kind(file=name, scan=scan_run)


def exit_status(ended: dict[str, Any] | None) -> str | None:
    """The job status a stored exit record says: exit code 0 completed, else failed;
    None while the run has not ended (records coming and stopping tell then)."""
    if not isinstance(ended, dict) or not isinstance(ended.get("exit_code"), int):
        return None
    return "completed" if ended["exit_code"] == 0 else "failed"
