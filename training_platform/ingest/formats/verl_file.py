"""verl's `file` logger as a job's metrics file: `{job_id}.jsonl` -> `training_metrics`.

verl (`trainer.logger=['console','file']`) writes one line per step,
``{"step": N, "data": {"actor/pg_loss": ..., "critic/score/mean": ..., ...}}``,
flat keys as its trainer logs them. Each line becomes a record with the key
mapping the verl adapter uses (`actor/pg_loss` -> `loss.actor_loss`,
`critic/score/mean` -> `reward.mean`, anything unknown under `extra` with
verl's own name); the lines carry no time, so a record's timestamp is when it
was read. verl opens the file with ``"wb"``: a restarted run truncates it and
writes again from the resumed step, which the line scanner sees as a
truncated file (read again from byte 0; a step written again replaces the
stored one), exactly as for the platform's own metrics file.

Everything else is the metrics file's: the same table, the same exactly-once
persister, the same live announcements (its kind is named ``metrics``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from training_platform.callbacks.wire.lines import parse_json_line
from training_platform.callbacks.wire.records import build_record
from training_platform.errors import RecordError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.metrics_file import METRICS

VERL_FILE_SUFFIX: Final = ".jsonl"


def decode_verl_line(line: bytes) -> dict[str, Any]:
    """One verl file-logger line -> a record; `RecordError` for anything else."""
    obj = parse_json_line(line)
    if not isinstance(obj, Mapping):
        raise RecordError("not a JSON object")
    step, data = obj.get("step"), obj.get("data")
    if type(step) is not int or step < 0:
        raise RecordError(f"'step' must be a non-negative integer, got {step!r}")
    if not isinstance(data, Mapping):
        raise RecordError("'data' must be an object of the step's metrics")
    try:
        return build_record(step, dict(data), timestamp=time.time())
    except (TypeError, ValueError) as exc:
        raise RecordError(str(exc)) from None


VERL_FILE = LineFileKind(
    name=METRICS.name,
    suffix=VERL_FILE_SUFFIX,
    decode=decode_verl_line,
    store=METRICS.store,
    key=METRICS.key,
    required=True,
)

# Job format -> the kind its metrics are read as (`jobs.format`; DESIGN.md §7).
METRICS_KINDS: Final = {"platform": METRICS, "verl_file": VERL_FILE}
