"""One line of ``{job_id}_system.jsonl``: one sample of one host (docs/contract.md)."""

from __future__ import annotations

from typing import Any, Final, Protocol

import orjson

_LINE: Final = orjson.OPT_APPEND_NEWLINE


class HostGroups(Protocol):
    def read(self) -> dict[str, dict[str, Any]]: ...


class Gpus(Protocol):
    def read(self) -> list[dict[str, Any]] | None: ...

    def close(self) -> None: ...


def build_sample(
    *, timestamp: float, host: str, step: int | None, groups: dict[str, dict[str, Any]],
    gpus: list[dict[str, Any]] | None,
) -> dict[str, Any]:  # fmt: skip
    """``timestamp``, ``host`` and ``step`` (null before the first), then the groups
    the host has; ``gpus`` only where NVML answered."""
    sample: dict[str, Any] = {"timestamp": timestamp, "host": host, "step": step}
    sample.update(groups)
    if gpus is not None:
        sample["gpus"] = gpus
    return sample


def encode_sample(sample: dict[str, Any]) -> bytes:
    """The sample as one JSON line (numbers are finite: rates are guarded where read)."""
    return orjson.dumps(sample, option=_LINE)
