"""The samples' text search `q`: which rows hold it, through the text indexes.

`q` means a case-insensitive substring of the prompt or the completion: the
exact predicate is `ILIKE '%q%'` on PostgreSQL and `lower(x) LIKE lower(?)`
elsewhere (`exact_match`), as it always was. The indexes
(`store/text_search.py`) only find the rows to test (`indexed_search`):

- SQLite: the FTS5 tables give the rowids of the completions, and of the
  prompts (then their samples, through `ix_samples_job_id_prompt_id`), that
  hold every trigram of `q`: one set of `samples` rowids, which the database
  either walks (few rows) or checks while it reads the primary key in step
  order (the key's index holds the rowid, so no row is read to check it). The
  exact `LIKE` then runs on those rows alone.
- PostgreSQL: the matching sample keys as a UNION of two `ILIKE`s, one per
  table (an OR across the join could use no index): the completions among
  the word index's candidates (`samples_words.py`), the prompts through
  pg_trgm's GIN index.

Either way a common word would cost more through the index than without it
(every row holding it is listed before the first page is known), while a
scan in step order finds a page of it within a few hundred rows: so the index
answers only when it finds few candidates. A needle of fewer than 3
characters has no trigram: it is always the scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Select,
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

from training_platform.history.samples_words import completions_with_words_of
from training_platform.store.models import Sample, SamplePrompt
from training_platform.store.stored_text import inflated
from training_platform.store.text_search import (
    MIN_INDEXED_CHARS,
    PROMPTS_FTS,
    SAMPLES_FTS,
    fts_match,
)
from training_platform.store.word_search import WORDS_INDEX

# Fewer candidate samples than this (both texts together) and the index answers `q`.
FEW_CANDIDATES: Final = 2_048


def exact_match(q: str, *, dialect: str) -> ColumnElement[bool]:
    """`q` in the prompt or the completion: ILIKE on PostgreSQL, lower() LIKE lower()
    elsewhere; `%`, `_` and `/` escaped (they match only themselves). On SQLite
    (`dialect`) the completion is stored compressed: inflated first (`tp_text`)."""
    completion = inflated(Sample.completion) if dialect == "sqlite" else Sample.completion
    return or_(
        SamplePrompt.text.icontains(q, autoescape=True),
        completion.icontains(q, autoescape=True),
    )


def indexed(q: str | None) -> bool:
    """Whether the indexes can serve `q` (it has a trigram)."""
    return q is not None and len(q) >= MIN_INDEXED_CHARS


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


def _word_keys(job_id: str, q: str, words: ColumnElement[bool]) -> ColumnElement[bool]:
    """(step, index) among the samples whose completion (among the word index's
    candidates, `words`), or prompt, holds `q`."""
    completions = select(Sample.step, Sample.sample_index).where(
        Sample.job_id == job_id, words, Sample.completion.icontains(q, autoescape=True)
    )
    # Any job's prompts, as in `indexed_search`: the samples' (job_id, prompt_id) keeps the job's.
    prompts = select(SamplePrompt.id).where(SamplePrompt.text.icontains(q, autoescape=True))
    by_prompt = Sample.__table__.alias("by_prompt")
    samples_of_prompts = select(by_prompt.c.step, by_prompt.c.sample_index).where(
        by_prompt.c.job_id == job_id, by_prompt.c.prompt_id.in_(prompts)
    )
    return tuple_(Sample.step, Sample.sample_index).in_(completions.union(samples_of_prompts))


def indexed_search(session: Session, job_id: str, q: str) -> ColumnElement[bool] | None:
    """`exact_match(q)` in the shape the indexes serve, when they should answer `q`;
    None when the scan should (then `exact_match` is the condition).

    The indexes answer when they find fewer than `FEW_CANDIDATES` samples of
    the job that may hold `q` (by their completion, or by their prompt). One
    statement counts them, at most `FEW_CANDIDATES` for each text (a LIMIT
    inside each count): a millisecond or so for a rare word, a few for a
    common one. A common word is left to the scan, as before the index: in
    step order the scan stops at the page's last hit, within a few hundred
    rows, where the index would first list every row holding it; in the other
    sorts both read every hit. On PostgreSQL without the indexes (`pg_trgm`
    refused), or for a `q` with no piece the word index can use, the scan.
    """
    if not indexed(q):
        return None
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
        match: ColumnElement[bool] = _fts_rows(job_id, q) & exact_match(q, dialect=dialect)
    elif dialect == "postgresql":
        if session.execute(select(func.to_regclass(WORDS_INDEX))).scalar() is None:
            return None  # pg_trgm refused: no index was built
        words = completions_with_words_of(session, q)
        if words is None:
            return None
        # The word index's candidates, not rechecked: `&&` is exact on it.
        completions = select(literal(1)).where(Sample.job_id == job_id, words)
        # Any job's prompts (the samples' index then keeps the job's): the job's
        # own index would otherwise read every prompt of the job to test each.
        prompt_ids = select(SamplePrompt.id).where(SamplePrompt.text.icontains(q, autoescape=True))
        match = _word_keys(job_id, q, words)
    else:
        return None
    by_prompt = select(literal(1)).where(Sample.job_id == job_id, Sample.prompt_id.in_(prompt_ids))
    first, second = (
        select(func.count()).select_from(part.limit(FEW_CANDIDATES).subquery()).scalar_subquery()
        for part in (completions, by_prompt)
    )
    with index_plans(session, dialect):
        found = session.execute(select(first + second)).scalar_one()
    return match if found < FEW_CANDIDATES else None


_PLANNER: Final = ("enable_seqscan", "enable_indexscan")


@contextmanager
def index_plans(session: Session, dialect: str | None) -> Iterator[None]:
    """Within: on PostgreSQL, rows read through bitmaps only (the trigram indexes').

    For statements that `indexed_search` found the index right for. The planner
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
