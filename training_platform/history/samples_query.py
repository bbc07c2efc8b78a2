"""Reading generated samples back out: filtered keyset pages, and per-step summaries.

A page is one query of LIMIT `limit` (and, when full, a LIMIT 1 probe for
more), never an OFFSET: the cursor carries the last row's sort key `(value,
step, index)` and the next page starts strictly after it. Sorts:

- "step": `(step, sample_index)`, the primary key: the step filters and the
  paging seek through it;
- "reward": the finite reward, then step, index; rows without one (no reward,
  or a non-finite one) come after all the others in both orders;
- "length": `response_length`, else the completion's characters (never NULL).
  No index holds these two: the database reads the filtered rows after the
  cursor and keeps the top `limit` (a top-N sort, not a full one).

"desc" reverses the whole key (value, step and index). The cursor:
`samples_cursor.py`. The text search `q`: `samples_search.py` (trigram
indexes; in step order, the next rows are tried without the index first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import ColumnElement, Select, and_, case, func, literal, or_, select
from sqlalchemy.orm import Session

from training_platform.history.samples_cursor import (
    MAX_CURSOR_CHARS,
    SampleSort,
    SortKey,
    SortOrder,
    decode_cursor,
    encode_cursor,
)
from training_platform.history.samples_search import exact_match, index_plans, indexed_search
from training_platform.store.models import Sample, SamplePrompt

__all__ = [
    "MAX_CURSOR_CHARS",
    "SAMPLES_JOINED",
    "SAMPLE_COLUMNS",
    "SampleFilter",
    "SamplePage",
    "SampleSort",
    "SortOrder",
    "sample_page",
    "sample_record",
    "step_summaries",
]

# What "sort by length" and the answer's `length` use.
LENGTH: Final = func.coalesce(Sample.response_length, Sample.completion_chars)


@dataclass(frozen=True)
class SampleFilter:
    """Every filter of the samples endpoint; None means "any"."""

    step: int | None = None
    start_step: int | None = None  # inclusive
    end_step: int | None = None  # inclusive
    group: str | None = None
    prompt_digest: str | None = None
    min_reward: float | None = None  # inclusive; excludes samples without a finite reward
    max_reward: float | None = None
    finish_reason: str | None = None
    q: str | None = None  # case-insensitive substring of the prompt or the completion


@dataclass(frozen=True)
class SamplePage:
    samples: list[dict[str, Any]]
    next_cursor: str | None  # None: nothing after this page


# --- pages ------------------------------------------------------------------------------


def _sort_value(sort: SampleSort) -> ColumnElement[Any] | None:
    if sort == "reward":
        return Sample.reward.expression
    if sort == "length":
        return LENGTH
    return None


def _step_column(where: SampleFilter) -> ColumnElement[Any]:
    """`step`, or `step + 0` when a prompt or group filter picks the rows (and no one step).

    A prompt's or group's few rows come from their own index, then are sorted;
    `step + 0` keeps SQLite (which has no statistics) from walking the whole
    job along the primary key instead, for the order or for a step range.
    """
    if where.step is None and (where.prompt_digest is not None or where.group is not None):
        return Sample.step + 0
    return Sample.step.expression


def _order_by(sort: SampleSort, order: SortOrder, where: SampleFilter) -> list[ColumnElement[Any]]:
    step = _step_column(where) if sort == "step" else Sample.step.expression
    position = [step, Sample.sample_index.expression]
    value = _sort_value(sort)
    keys = position if value is None else [value, *position]
    ordered: list[ColumnElement[Any]] = [
        key.desc() if order == "desc" else key.asc() for key in keys
    ]
    if sort == "reward":
        # NULLs (no finite reward) last in both orders, whatever the database's default.
        ordered[0] = ordered[0].nulls_last()
    return ordered


def _after(sort: SampleSort, order: SortOrder, key: SortKey) -> ColumnElement[bool]:
    """Rows strictly after `key` in the page order, for the value sorts (the step sort's
    keyset is part of the step bounds: `_step_clauses`)."""
    column = Sample.reward.expression if sort == "reward" else LENGTH
    value, step, index = key
    if order == "desc":
        later = or_(Sample.step < step, and_(Sample.step == step, Sample.sample_index < index))
    else:
        later = or_(Sample.step > step, and_(Sample.step == step, Sample.sample_index > index))
    if value is None:  # within the NULL tail (rewards only): by position alone
        return and_(column.is_(None), later)
    beyond = column < value if order == "desc" else column > value
    ahead = or_(beyond, and_(column == value, later))
    return or_(ahead, column.is_(None)) if sort == "reward" else ahead


def _step_clauses(
    where: SampleFilter, order: SortOrder, position: tuple[int, int] | None
) -> list[ColumnElement[bool]]:
    """The step filters and the step sort's keyset as one range of the primary key.

    Folded by hand: SQLite without statistics takes `step > ?` over `step = ?`
    when given both, and would then read every step after the one asked for.
    """
    column = _step_column(where)
    low = max((b for b in (where.step, where.start_step) if b is not None), default=None)
    high = min((b for b in (where.step, where.end_step) if b is not None), default=None)
    tie: ColumnElement[bool] | None = None  # which rows of the cursor's own step follow it
    if position is not None:
        step, index = position
        if order == "asc" and (low is None or step >= low):
            low, tie = step, Sample.sample_index > index
        elif order == "desc" and (high is None or step <= high):
            high, tie = step, Sample.sample_index < index
    if low is not None and low == high:
        return [column == low] if tie is None else [column == low, tie]
    clauses: list[ColumnElement[bool]] = []
    if low is not None:
        clauses.append(column >= low)
    if high is not None:
        clauses.append(column <= high)
    if tie is not None:
        clauses.append(or_(column > low, tie) if order == "asc" else or_(column < high, tie))
    return clauses


def _filtered(
    query: Select[Any],
    job_id: str,
    where: SampleFilter,
    order: SortOrder = "asc",
    position: tuple[int, int] | None = None,
    *,
    dialect: str,
    match: ColumnElement[bool] | None,
) -> Select[Any]:
    """`where`, and with `position` (the step sort's keyset) only rows after it; `q`
    as `match` (`indexed_search`'s), else as a scan on `dialect`."""
    query = query.where(Sample.job_id == job_id, *_step_clauses(where, order, position))
    if where.group is not None:
        query = query.where(Sample.group_key == where.group)
    if where.prompt_digest is not None:
        # One indexed lookup of the prompt's id (unique per job), then ix_samples_job_id_prompt_id.
        prompt_id = select(SamplePrompt.id).where(
            SamplePrompt.job_id == job_id, SamplePrompt.digest == where.prompt_digest
        )
        query = query.where(Sample.prompt_id == prompt_id.scalar_subquery())
    if where.min_reward is not None:
        query = query.where(Sample.reward >= where.min_reward)
    if where.max_reward is not None:
        query = query.where(Sample.reward <= where.max_reward)
    if where.finish_reason is not None:
        query = query.where(Sample.finish_reason == where.finish_reason)
    if where.q is not None:
        query = query.where(exact_match(where.q, dialect=dialect) if match is None else match)
    return query


# A sample as the API shows it: these columns, `sample_record` of the row (the export
# reads them too, history/export/sources.py).
SAMPLE_COLUMNS: Final = (
    Sample.step,
    Sample.sample_index,
    Sample.timestamp,
    SamplePrompt.text,
    SamplePrompt.digest,
    Sample.completion,
    Sample.reward,
    Sample.reward_nonfinite,
    Sample.rewards,
    Sample.group_key,
    Sample.response_length,
    LENGTH.label("length"),
    Sample.finish_reason,
    Sample.extra,
)
SAMPLES_JOINED: Final = Sample.__table__.join(
    SamplePrompt.__table__, SamplePrompt.id == Sample.prompt_id
)


def sample_page(
    session: Session,
    *,
    job_id: str,
    where: SampleFilter,
    sort: SampleSort = "step",
    order: SortOrder = "asc",
    limit: int,
    cursor: str | None = None,
) -> SamplePage:
    """At most `limit` samples after `cursor`, in the sort's order.

    Two statements: the page (LIMIT `limit`), and, only when the page is full,
    whether any row lies after its last one (an EXISTS of LIMIT 1), so the
    last page says so (`next_cursor` None) without fetching a row more. With
    `q`, first those that say whether the text indexes serve it (`indexed_search`).
    """
    key = None if cursor is None else decode_cursor(cursor, sort, order)
    dialect = session.get_bind().dialect.name
    # How the text indexes answer `q`; None: the scan (samples_search.py).
    match = None if where.q is None else indexed_search(session, job_id, where.q)
    query = _keyset(
        select(*SAMPLE_COLUMNS).select_from(SAMPLES_JOINED),
        job_id,
        where,
        sort,
        order,
        key,
        dialect,
        match,
    )
    with index_plans(session, None if match is None else dialect):
        rows = session.execute(query.order_by(*_order_by(sort, order, where)).limit(limit)).all()
        if len(rows) < limit:
            return SamplePage([sample_record(row) for row in rows], None)
        last = rows[-1]
        key = (_key_value(sort, last), last.step, last.sample_index)
        source = SAMPLES_JOINED if where.q is not None else Sample.__table__
        rest = select(literal(1)).select_from(source)
        more = _keyset(rest, job_id, where, sort, order, key, dialect, match)
        ended = session.execute(more.limit(1)).first() is None
    samples = [sample_record(row) for row in rows]
    return SamplePage(samples, None if ended else encode_cursor(sort, order, key))


def _keyset(
    query: Select[Any],
    job_id: str,
    where: SampleFilter,
    sort: SampleSort,
    order: SortOrder,
    key: SortKey | None,
    dialect: str,
    match: ColumnElement[bool] | None,
) -> Select[Any]:
    """`where`, and only the rows after `key` (None: from the first)."""
    if key is None:
        return _filtered(query, job_id, where, dialect=dialect, match=match)
    if sort == "step":
        position = (key[1], key[2])
        return _filtered(query, job_id, where, order, position, dialect=dialect, match=match)
    filtered = _filtered(query, job_id, where, dialect=dialect, match=match)
    return filtered.where(_after(sort, order, key))


def _key_value(sort: SampleSort, row: Any) -> float | int | None:
    if sort == "reward":
        return None if row.reward is None else float(row.reward)
    if sort == "length":
        return int(row.length)
    return None


def sample_record(row: Any) -> dict[str, Any]:
    """A row in the API's shape; a non-finite reward is its name ("NaN", "Infinity", ...)."""
    return {
        "step": row.step,
        "index": row.sample_index,
        "timestamp": row.timestamp,
        "prompt": row.text,
        "prompt_digest": row.digest,
        "completion": row.completion,
        "reward": row.reward if row.reward is not None else row.reward_nonfinite,
        "rewards": row.rewards,
        "group": row.group_key,
        "response_length": row.response_length,
        "length": row.length,
        "finish_reason": row.finish_reason,
        "extra": row.extra,
    }


# --- per-step summaries -----------------------------------------------------------------


@dataclass(frozen=True)
class StepsPage:
    steps: list[dict[str, Any]]
    next_start_step: int | None  # where the next page starts; None: nothing remains


def _number(value: Any) -> float | None:
    # PostgreSQL's avg() of integers is numeric (a Decimal): made a float here.
    return None if value is None else float(value)


def step_summaries(
    session: Session,
    *,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    limit: int,
) -> StepsPage:
    """One GROUP BY over the primary key's (job_id, step) prefix: `limit` steps, plus one
    to know where the next page starts."""
    query = select(
        Sample.step,
        func.count().label("count"),
        func.count(Sample.group_key.distinct()).label("groups"),
        func.avg(Sample.reward).label("reward_mean"),
        func.min(Sample.reward).label("reward_min"),
        func.max(Sample.reward).label("reward_max"),
        func.avg(LENGTH).label("length_mean"),
        func.max(LENGTH).label("length_max"),
        func.sum(case((Sample.finish_reason == "length", 1), else_=0)).label("truncated"),
    ).where(Sample.job_id == job_id)
    if start_step is not None:
        query = query.where(Sample.step >= start_step)
    if end_step is not None:
        query = query.where(Sample.step <= end_step)
    query = query.group_by(Sample.step).order_by(Sample.step).limit(limit + 1)
    rows = session.execute(query).all()
    steps = [
        {
            "step": row.step,
            "count": row.count,
            "groups": row.groups,
            "reward_mean": _number(row.reward_mean),
            "reward_min": _number(row.reward_min),
            "reward_max": _number(row.reward_max),
            "length_mean": _number(row.length_mean),
            "length_max": None if row.length_max is None else int(row.length_max),
            "truncated": int(row.truncated or 0),
        }
        for row in rows[:limit]
    ]
    return StepsPage(steps, rows[limit].step if len(rows) > limit else None)
