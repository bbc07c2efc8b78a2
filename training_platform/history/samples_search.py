"""The samples' text search `q`: which rows hold it, through the trigram indexes.

`q` means a case-insensitive substring of the prompt or the completion: the
exact predicate is `ILIKE '%q%'` on PostgreSQL and `lower(x) LIKE lower(?)`
elsewhere (`exact_match`), as it always was. The indexes
(`store/text_search.py`) only find the rows to test (`indexed_match`):

- SQLite: the FTS5 tables give the rowids of the completions, and of the
  prompts (then their samples, through `ix_samples_job_id_prompt_id`), that
  hold every trigram of `q`: one set of `samples` rowids, which the database
  either walks (few rows) or checks while it reads the primary key in step
  order (the key's index holds the rowid, so no row is read to check it). The
  exact `LIKE` then runs on those rows alone.
- PostgreSQL: the matching sample keys as a UNION of two `ILIKE`s, one per
  table, which pg_trgm's GIN indexes serve (an OR across the join could use
  neither).

Either way a common word would cost more through the index than without it
(every row holding it is listed before the first page is known), while a
scan in step order finds a page of it within a few hundred rows: so the index
answers only when it finds few candidates (`use_index`). A needle of fewer
than 3 characters has no trigram: it is always the scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Select,
    case,
    column,
    func,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    tuple_,
)
from sqlalchemy.orm import Session

from training_platform.store.models import Sample, SamplePrompt
from training_platform.store.text_search import (
    MIN_INDEXED_CHARS,
    PROMPTS_FTS,
    SAMPLES_FTS,
    TRIGRAM_INDEXES,
    fts_match,
)

# Fewer candidate samples than this (both texts together) and the index answers `q`.
FEW_CANDIDATES: Final = 2_048


def exact_match(q: str) -> ColumnElement[bool]:
    """`q` in the prompt or the completion: ILIKE on PostgreSQL, lower() LIKE lower()
    elsewhere; `%`, `_` and `/` escaped (they match only themselves)."""
    return or_(
        SamplePrompt.text.icontains(q, autoescape=True),
        Sample.completion.icontains(q, autoescape=True),
    )


def indexed(q: str | None) -> bool:
    """Whether the indexes can serve `q` (it has a trigram)."""
    return q is not None and len(q) >= MIN_INDEXED_CHARS


def indexed_match(dialect: str, job_id: str, q: str) -> ColumnElement[bool]:
    """`exact_match`, in the shape that lets the trigram indexes find the rows.

    Only for a `q` that `indexed` accepts; on a database other than SQLite and
    PostgreSQL, the exact match alone.
    """
    if dialect == "sqlite":
        return _fts_rows(job_id, q) & exact_match(q)
    if dialect == "postgresql":
        return _trigram_keys(job_id, q)
    return exact_match(q)


def _fts_rowids(fts: str, q: str) -> Select[Any]:
    """The rowids the FTS table `fts` gives for `q` (any job's: it holds no job)."""
    query: Select[Any] = select(column("rowid")).select_from(table(fts))
    return query.where(literal_column(fts).op("MATCH")(fts_match(q)))


def _fts_rows(job_id: str, q: str) -> ColumnElement[bool]:
    """samples.rowid among the FTS candidates: the completions holding every trigram
    of `q`, and the samples of the prompts that do."""
    by_prompt = Sample.__table__.alias("by_prompt")
    samples_of_prompts: Select[Any] = select(literal_column("by_prompt.rowid")).where(
        by_prompt.c.job_id == job_id, by_prompt.c.prompt_id.in_(_fts_rowids(PROMPTS_FTS, q))
    )
    candidates = _fts_rowids(SAMPLES_FTS, q).union_all(samples_of_prompts)
    return literal_column("samples.rowid").in_(candidates)


def _trigram_keys(job_id: str, q: str) -> ColumnElement[bool]:
    """(step, index) among the samples whose completion, or prompt, holds `q`."""
    completions = select(Sample.step, Sample.sample_index).where(
        Sample.job_id == job_id, Sample.completion.icontains(q, autoescape=True)
    )
    # Any job's prompts, as in `use_index`: the samples' (job_id, prompt_id) keeps the job's.
    prompts = select(SamplePrompt.id).where(SamplePrompt.text.icontains(q, autoescape=True))
    by_prompt = Sample.__table__.alias("by_prompt")
    samples_of_prompts = select(by_prompt.c.step, by_prompt.c.sample_index).where(
        by_prompt.c.job_id == job_id, by_prompt.c.prompt_id.in_(prompts)
    )
    return tuple_(Sample.step, Sample.sample_index).in_(completions.union(samples_of_prompts))


def use_index(session: Session, job_id: str, q: str) -> bool:
    """Whether the index should answer `q`: it has a trigram, and the index finds
    fewer than `FEW_CANDIDATES` samples of the job that may hold it (by their
    completion, or by their prompt).

    One statement counts them, at most `FEW_CANDIDATES` for each text (a LIMIT
    inside each count): a millisecond or so for a rare word, a few for a
    common one on SQLite (more on PostgreSQL, which rechecks the text). A
    common word is left to the scan, as before the index: in step order the
    scan stops at the page's last hit, within a few hundred rows, where the
    index would first list (and on PostgreSQL recheck) every row holding it;
    in the other sorts both read every hit. On PostgreSQL
    without the trigram indexes (`pg_trgm` refused), always the scan.
    """
    if not indexed(q):
        return False
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        # The FTS table drives, each candidate's job looked up by rowid (a join
        # would let SQLite walk the job's samples and probe the FTS for each).
        fts = table(SAMPLES_FTS, column("rowid"))
        job_of = select(Sample.job_id).where(literal_column("samples.rowid") == fts.c.rowid)
        completions = (
            select(literal(1))
            .select_from(fts)
            .where(literal_column(SAMPLES_FTS).op("MATCH")(fts_match(q)))
            .where(job_of.scalar_subquery() == job_id)
        )
        prompt_ids = _fts_rowids(PROMPTS_FTS, q)
    elif dialect == "postgresql":
        completions = select(literal(1)).where(
            Sample.job_id == job_id, Sample.completion.icontains(q, autoescape=True)
        )
        # Any job's prompts (the samples' index then keeps the job's): the job's
        # own index would otherwise read every prompt of the job to test each.
        prompt_ids = select(SamplePrompt.id).where(SamplePrompt.text.icontains(q, autoescape=True))
    else:
        return False
    by_prompt = select(literal(1)).where(Sample.job_id == job_id, Sample.prompt_id.in_(prompt_ids))
    first, second = (
        select(func.count()).select_from(part.limit(FEW_CANDIDATES).subquery()).scalar_subquery()
        for part in (completions, by_prompt)
    )
    count: ColumnElement[Any] = first + second
    if dialect == "sqlite":
        return bool(session.execute(select(count)).scalar_one() < FEW_CANDIDATES)
    # NULL without the index: its subqueries never run.
    indexed_here = func.to_regclass(next(iter(TRIGRAM_INDEXES))).is_not(None)
    with index_plans(session, dialect):
        found = session.execute(select(case((indexed_here, count), else_=None))).scalar_one()
    return found is not None and found < FEW_CANDIDATES


_PLANNER: Final = ("enable_seqscan", "enable_indexscan")


@contextmanager
def index_plans(session: Session, dialect: str | None) -> Iterator[None]:
    """Within: on PostgreSQL, rows read through bitmaps only (the trigram indexes').

    For statements that `use_index` found the index right for. The planner
    prices an ILIKE like any operator, while on 2 KB of text it costs ~10 us:
    it would rather test every prompt of a job than use the prompts' index,
    or count a common word's first candidates by reading the table in order
    (~5 rows per hit for a word in 1 sample of 5) rather than only its
    candidates. The settings are the transaction's (`set_config(..., true)`),
    restored on the way out (an error rolls the transaction back, and them).
    """
    if dialect != "postgresql":
        yield
        return
    names = ", ".join(f"current_setting('{name}')" for name in _PLANNER)
    before = session.execute(text(f"SELECT {names}")).one()
    off = ", ".join(f"set_config('{name}', 'off', true)" for name in _PLANNER)
    session.execute(text(f"SELECT {off}"))
    yield
    restore = ", ".join(f"set_config('{name}', :v{i}, true)" for i, name in enumerate(_PLANNER))
    session.execute(text(f"SELECT {restore}"), {f"v{i}": v for i, v in enumerate(before)})
