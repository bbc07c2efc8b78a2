"""Response models of the samples endpoints (docs/contract.md, "Samples")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

NonFinite = Literal["NaN", "Infinity", "-Infinity"]


class SampleOut(BaseModel):
    """One generated sample, as its line gave it, plus `prompt_digest` and `length`."""

    step: int
    index: int
    timestamp: float | None
    prompt: str
    prompt_digest: str = Field(description="sha256 of the prompt (hex): the `prompt` filter.")
    completion: str
    reward: float | NonFinite | None = Field(
        description='A number, "NaN"/"Infinity"/"-Infinity" for a non-finite reward, or null.'
    )
    rewards: dict[str, float | NonFinite | None] | None
    group: str | None
    response_length: int | None
    length: int = Field(description="response_length if given, else the completion's characters.")
    finish_reason: str | None
    extra: dict[str, Any] | None


class SampleList(BaseModel):
    job_id: str
    samples: list[SampleOut]
    next_cursor: str | None = Field(
        description="More samples follow: pass as `cursor` (same sort and order) for the next "
        "page; null on the last page."
    )


class StepSamplesOut(BaseModel):
    """The samples of one step, summarised."""

    step: int
    count: int
    groups: int = Field(description="Distinct group keys (0 when none).")
    reward_mean: float | None = Field(description="Over finite rewards only; null when none.")
    reward_min: float | None
    reward_max: float | None
    length_mean: float | None
    length_max: int | None
    truncated: int = Field(description='Samples with finish_reason "length".')


class SampleStepList(BaseModel):
    job_id: str
    steps: list[StepSamplesOut]
    next_start_step: int | None = Field(
        description="More steps remain: pass as start_step; null when this was the last page."
    )
