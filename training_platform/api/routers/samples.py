"""`/api/monitoring/{job_id}/samples`: generated samples, filtered and keyset-paged; per-step
summaries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from training_platform.api.deps import KnownJobId, SessionDep
from training_platform.api.params import NOT_FOUND, StepQuery, check_step_range
from training_platform.api.samples_schema import (
    SampleList,
    SampleOut,
    SampleStepList,
    StepSamplesOut,
)
from training_platform.callbacks.wire.schema import MAX_STEP
from training_platform.history.samples_query import (
    MAX_CURSOR_CHARS,
    SampleFilter,
    SampleSort,
    SortOrder,
    sample_page,
    step_summaries,
)

router = APIRouter(prefix="/monitoring/{job_id}", tags=["samples"])

MAX_SAMPLES = 1_000
MAX_STEPS = 10_000
RewardQuery = Annotated[
    float | None,
    Query(allow_inf_nan=False, description="Inclusive; samples without a finite reward drop out."),
]


@router.get("/samples", response_model=SampleList, summary="Samples", responses=NOT_FOUND)
def samples(
    job_id: KnownJobId,
    session: SessionDep,
    step: Annotated[int | None, Query(ge=0, le=MAX_STEP, description="Only this step.")] = None,
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    group: Annotated[str | None, Query(max_length=256, description="Exact group key.")] = None,
    prompt: Annotated[
        str | None,
        Query(pattern="^[0-9a-f]{64}$", description="A prompt's digest (sha256, lowercase hex)."),
    ] = None,
    min_reward: RewardQuery = None,
    max_reward: RewardQuery = None,
    finish_reason: Annotated[
        str | None, Query(max_length=32, description="Exact finish reason.")
    ] = None,
    q: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            description="Case-insensitive substring of the prompt or the completion "
            "(% and _ match themselves).",
        ),
    ] = None,
    sort: Annotated[
        SampleSort,
        Query(description="step (then index), reward or length (then step, index)."),
    ] = "step",
    order: Annotated[SortOrder, Query(description="asc or desc (the whole key).")] = "asc",
    limit: Annotated[int, Query(ge=1, le=MAX_SAMPLES, description="Samples per page.")] = 100,
    cursor: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_CURSOR_CHARS,
            description="`next_cursor` of the previous page (same sort and order).",
        ),
    ] = None,
) -> SampleList:
    """Samples in the chosen order, `limit` at a time, every filter combined (AND).

    `sort=reward` and `sort=length` order by that value, then step and index;
    samples without a finite reward come last in both orders. Follow
    `next_cursor` (keyset paging): pages never overlap or skip a sample.
    Non-finite rewards are the strings "NaN", "Infinity", "-Infinity".
    """
    check_step_range(start_step, end_step)
    where = SampleFilter(
        step=step,
        start_step=start_step,
        end_step=end_step,
        group=group,
        prompt_digest=prompt,
        min_reward=min_reward,
        max_reward=max_reward,
        finish_reason=finish_reason,
        q=q,
    )
    page = sample_page(
        session, job_id=job_id, where=where, sort=sort, order=order, limit=limit, cursor=cursor
    )
    return SampleList(
        job_id=job_id,
        samples=[SampleOut.model_validate(sample) for sample in page.samples],
        next_cursor=page.next_cursor,
    )


@router.get(
    "/samples/steps",
    response_model=SampleStepList,
    summary="Samples per step",
    responses=NOT_FOUND,
)
def sample_steps(
    job_id: KnownJobId,
    session: SessionDep,
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_STEPS, description="Steps per page.")] = MAX_STEPS,
) -> SampleStepList:
    """Per step with samples, in step order: counts, groups, reward and length figures.

    Rewards count only when finite; `length` is response_length, else the
    completion's characters; `truncated` counts finish_reason "length".
    """
    check_step_range(start_step, end_step)
    page = step_summaries(
        session, job_id=job_id, start_step=start_step, end_step=end_step, limit=limit
    )
    return SampleStepList(
        job_id=job_id,
        steps=[StepSamplesOut.model_validate(summary) for summary in page.steps],
        next_start_step=page.next_start_step,
    )
