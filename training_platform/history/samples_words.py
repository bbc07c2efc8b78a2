"""PostgreSQL: which completions may hold `q`, through their word index.

`store/word_search.py` says why this is exact: each piece of `q` (a run of
word characters, cut as the index cuts a completion) lies inside a word of
every completion that holds `q`, so such a completion's words overlap the
vocabulary's words that contain the piece (or carry the long-word mark).
The candidates are the completions that overlap for every piece; the caller
rechecks them with the exact `ILIKE`.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import ColumnElement, Text, and_, bindparam, column, func, select, table, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from training_platform.store.models import Sample
from training_platform.store.word_search import LONG_MARK, VOCABULARY, WORDS_FUNCTION

# A piece needs a trigram for the vocabulary's index; a shorter one is in
# too many words to narrow anything.
MIN_PIECE: Final = 3
# A piece found in more words than this ("the", "ing") narrows little and
# makes a long list: it is left out (the other pieces and the recheck decide).
MAX_WORDS: Final = 2_000

_PIECES: Final = text(
    "SELECT DISTINCT piece FROM regexp_split_to_table(lower(:q), '\\W+') AS piece"
    " WHERE length(piece) >= :shortest"
)
_VOCABULARY: Final = table(VOCABULARY, column("word", Text))


def pieces(session: Session, q: str) -> list[str]:
    """`q` lower-cased and cut into runs of word characters by the database itself
    (its `lower` and `\\W`, as the index cut the completions), the short ones left out."""
    found = session.execute(_PIECES, {"q": q, "shortest": MIN_PIECE}).scalars()
    return sorted(found)


def words_containing(session: Session, piece: str) -> list[str] | None:
    """The vocabulary's words that contain `piece`; None when there are more than
    `MAX_WORDS` (the piece narrows little)."""
    # `_` is a word character: escaped (autoescape), it matches only itself.
    query = (
        select(_VOCABULARY.c.word)
        .where(_VOCABULARY.c.word.contains(piece, autoescape=True))
        .limit(MAX_WORDS + 1)
    )
    words = list(session.execute(query).scalars())
    return None if len(words) > MAX_WORDS else words


def completions_with_words_of(session: Session, q: str) -> ColumnElement[bool] | None:
    """A condition on `samples` that every completion holding `q` meets, served by
    the word index; None when no piece of `q` narrows the completions (the scan)."""
    clauses = []
    for piece in pieces(session, q):
        words = words_containing(session, piece)
        if words is None:
            continue
        overlap = bindparam(None, [*words, LONG_MARK], type_=ARRAY(Text))
        clauses.append(getattr(func, WORDS_FUNCTION)(Sample.completion).op("&&")(overlap))
    return and_(*clauses) if clauses else None
