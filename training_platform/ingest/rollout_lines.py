"""verl's rollout dumps, `{rollout_data_dir}/{step}.jsonl`: names and lines -> samples.

verl (`trainer.rollout_data_dir`) writes one file per training step, whole,
once: one JSON object per generated sample,
``{"input": ..., "output": ..., "score": ..., "step": ..., "gts": ...,
<the reward function's extra keys>}``. Each becomes a sample of the job, the
same dict a `{job_id}_samples.jsonl` line decodes to (`wire_samples`), so the
samples table, the samples API, the live `samples` messages and the sample
detectors need nothing of their own:

- prompt = ``input``, completion = ``output`` (strings, required);
- reward = ``score`` (a number; NaN and the infinities kept), or none;
- step = the file name's; a line's own ``step``, when present, must be the
  same number, else the line is malformed (a line copied into the wrong file
  would otherwise land at a step it does not belong to);
- index = the line's position in its file, from 0, counting every line, so a
  skipped line never shifts the indexes of the others;
- group = ``uid`` (verl's GRPO group id) when present; ``finish_reason`` and
  ``response_length`` when present under those names;
- extra = ``gts`` and every other key.
"""

from __future__ import annotations

import re
from typing import Any, Final

from training_platform.callbacks.wire.lines import parse_json_line
from training_platform.callbacks.wire.samples import normalize_sample
from training_platform.callbacks.wire.schema import INT64_MAX
from training_platform.errors import RecordError

ROLLOUTS_SUFFIX: Final = "_rollouts"  # `{job_id}_rollouts/` next to the metrics file
ROLLOUT_KIND_PREFIX: Final = "rollout:"  # `sync_state.kind` of a step file: "rollout:<step>"
# A step file's name: the step in decimal, as verl writes it (no sign, no
# leading zero, at most 19 digits), then ".jsonl". Anything else is ignored:
# "007.jsonl" next to "7.jsonl" would be two files for one step.
_STEP_NAME: Final = re.compile(r"(0|[1-9][0-9]{0,18})\.jsonl")
# Keys that are not `extra`: they are the sample's own fields.
_OWN_KEYS: Final = frozenset(
    {"input", "output", "score", "step", "uid", "finish_reason", "response_length"}
)


def step_of_name(name: str) -> int | None:
    """The step of a rollout file named `name`, or None when it is not one."""
    match = _STEP_NAME.fullmatch(name)
    if match is None:
        return None
    step = int(match.group(1))
    return step if step <= INT64_MAX else None


def state_kind(step: int) -> str:
    """The `sync_state.kind` of the step's file."""
    return f"{ROLLOUT_KIND_PREFIX}{step}"


def _same_step(value: Any, step: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and value == step


def decode_rollout_line(
    line: bytes, step: int, index: int, timestamp: float | None = None
) -> dict[str, Any]:
    """One complete line (without its ``\\n``) of step `step`'s file, at position
    `index`, into a sample (every key of `wire_samples.SAMPLE_KEYS`).

    Raises `RecordError` for a line that is not a rollout; `timestamp` (the
    file's modification time) becomes the sample's.
    """
    obj = parse_json_line(line)
    if not isinstance(obj, dict):
        raise RecordError("a rollout line must be a JSON object")
    for required in ("input", "output"):
        if not isinstance(obj.get(required), str):
            raise RecordError(f"a rollout line needs {required!r} (a string)")
    if "step" in obj and not _same_step(obj["step"], step):
        raise RecordError(f"its step {obj['step']!r} is not its file's ({step})")
    extra = {key: value for key, value in obj.items() if key not in _OWN_KEYS}
    return normalize_sample(
        {
            "step": step,
            "index": index,
            "timestamp": timestamp,
            "prompt": obj["input"],
            "completion": obj["output"],
            "reward": obj.get("score"),
            "group": obj.get("uid"),
            "finish_reason": obj.get("finish_reason"),
            "response_length": obj.get("response_length"),
            "extra": extra or None,
        }
    )


def decode_rollout_file(
    data: bytes, step: int, *, max_line_bytes: int, timestamp: float | None = None
) -> tuple[list[dict[str, Any]], int, int, list[str]]:
    """Every line of a complete step file: (samples, malformed, oversized, errors).

    `data` ends with ``\\n`` (the caller holds back a file that does not).
    Blank lines are skipped silently but keep their position; the first few
    problems are described in `errors`.
    """
    samples: list[dict[str, Any]] = []
    malformed = oversized = 0
    errors: list[str] = []
    lines = data.split(b"\n")
    lines.pop()  # after the final newline: nothing
    for index, line in enumerate(lines):
        reason = None
        if len(line) > max_line_bytes:
            oversized += 1
            reason = f"longer than {max_line_bytes} bytes, skipped"
        elif line.strip():
            try:
                samples.append(decode_rollout_line(line, step, index, timestamp))
            except Exception as exc:  # any bad line is skipped, never blocks the others
                malformed += 1
                reason = str(exc) or type(exc).__name__
        if reason is not None and len(errors) < 5:
            errors.append(f"rollout step {step} line {index}: {reason[:200]}")
    return samples, malformed, oversized, errors
