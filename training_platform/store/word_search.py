"""PostgreSQL: the completions' text search through their words, not their trigrams.

`q` is a case-insensitive substring of a completion (`ILIKE '%q%'`); an index
only has to name the rows that may hold it, and the ILIKE rechecks them. A
trigram index (pg_trgm's GIN) does that, but it keeps ~1,000 trigrams of a
2 KB completion: on its own it was about as large as the samples' JSONL
(docs/benchmarks.md, Samples). A completion holds ~150 distinct words, so
this index is a GIN over each completion's *words*, ~4x smaller, and the
words of `q` are looked up in a vocabulary:

- `tp_words(text)`: the lower-cased runs of word characters (`\\w`: letters,
  digits, `_`) of a text, each longer than `LONG_WORD` characters replaced by
  `LONG_MARK` (a GIN key has a size limit, and a vocabulary of every long run,
  say a degenerate "aaaa...", would only grow); a `~` of the text itself is a
  separator, like any other character that is not a word character. The
  index is on that expression (`ix_samples_completion_words`): nothing more
  is stored per row.
- `sample_words`: every word any completion ever held (any job's; a word
  whose samples are gone stays, which only widens a lookup), kept by
  statement-level triggers on `samples`, with a pg_trgm index to find the
  words that contain a piece of `q`.

Why that is exact (`history/samples_words.py` uses it): lower-case `q` and
cut it the same way into pieces; if a completion holds `q`, each piece lies
inside one of the completion's words (the same characters are word
characters in both), so the completion's words include one of the
vocabulary's words that contain the piece, or the long-word mark. A piece
found in too many words narrows nothing and is left out; a `q` with no
piece of 3 characters or more (say "!!!" or "a b") is answered by the scan.
Text without spaces (Chinese, Japanese) is mostly runs longer than
`LONG_WORD`: such samples are candidates of every `q`, which then scans.

The prompts keep their trigram index: they are stored once per group, so it
is small, and a prompt is looked up by the same `ILIKE`.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

LONG_WORD: Final = 48
LONG_MARK: Final = "~"  # not a word character: no piece of `q` is ever equal to it
WORDS_FUNCTION: Final = "tp_words"
WORDS_INDEX: Final = "ix_samples_completion_words"
VOCABULARY: Final = "sample_words"
VOCABULARY_INDEX: Final = "ix_sample_words_trgm"
_ADD_WORDS: Final = "tp_sample_words_add"
_TRIGGERS: Final = ("samples_words_insert", "samples_words_update")
# What `is_text_search_object` must leave out of Alembic's comparison.
OBJECTS: Final = frozenset({WORDS_INDEX, VOCABULARY, VOCABULARY_INDEX, f"pk_{VOCABULARY}"})

_DDL: Final = (
    # IMMUTABLE (lower() and the regex depend only on the database's locale,
    # fixed at its creation): what an index expression needs. A `~` of the text
    # becomes a space first, so that the only `~` left is the long-run mark, a
    # word of its own; then long runs become the mark, and the text is cut at
    # everything else that is not a word character. Three C-level passes
    # (~140 us for 1.5 KB here), where a set-returning function taking each
    # word in turn cost ~180-240 us. The array may hold '' (text that starts
    # or ends with a separator): no piece is empty, and the vocabulary skips it.
    f"""CREATE OR REPLACE FUNCTION {WORDS_FUNCTION}(body text) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT regexp_split_to_array(
        regexp_replace(translate(lower(body), '{LONG_MARK}', ' '),
                       '\\w{{{LONG_WORD + 1},}}', '{LONG_MARK}', 'g'),
        '[^\\w{LONG_MARK}]+')
    $$""",
    f"CREATE TABLE IF NOT EXISTS {VOCABULARY} (word text NOT NULL,"
    f" CONSTRAINT pk_{VOCABULARY} PRIMARY KEY (word))",
    # Sorted: two writers adding the same new words take their locks in one order.
    f"""CREATE OR REPLACE FUNCTION {_ADD_WORDS}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO {VOCABULARY} (word)
      SELECT DISTINCT w FROM new_rows, unnest({WORDS_FUNCTION}(new_rows.completion)) AS w
      WHERE w NOT IN ('{LONG_MARK}', '') ORDER BY 1
      ON CONFLICT DO NOTHING;
      RETURN NULL;
    END $$""",
    *(
        statement
        for name, event in zip(_TRIGGERS, ("INSERT", "UPDATE"), strict=True)
        for statement in (
            f"DROP TRIGGER IF EXISTS {name} ON samples",
            f"CREATE TRIGGER {name} AFTER {event} ON samples REFERENCING NEW TABLE AS new_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {_ADD_WORDS}()",
        )
    ),
    # New entries wait in a pending list, merged in bulk when it fills: 2.4x
    # faster inserts than straight into the posting lists. At the default 4 MB
    # the unpacked list would outweigh a small job's index: 256 kB keeps
    # nearly all of the speed.
    f"CREATE INDEX IF NOT EXISTS {WORDS_INDEX} ON samples"
    f" USING gin ({WORDS_FUNCTION}(completion)) WITH (gin_pending_list_limit = 256)",
)


def create_word_search(connection: Connection, *, with_trigrams: bool) -> None:
    """The word index, the vocabulary (filled from the samples already stored) and
    its triggers; the vocabulary's trigram index only `with_trigrams` (pg_trgm)."""
    for statement in _DDL:
        connection.execute(text(statement))
    connection.execute(
        text(
            f"INSERT INTO {VOCABULARY} (word) SELECT DISTINCT w FROM samples,"
            f" unnest({WORDS_FUNCTION}(completion)) AS w WHERE w NOT IN ('{LONG_MARK}', '')"
            " ON CONFLICT DO NOTHING"
        )
    )
    if with_trigrams:
        connection.execute(
            text(
                f"CREATE INDEX IF NOT EXISTS {VOCABULARY_INDEX} ON {VOCABULARY}"
                " USING gin (word gin_trgm_ops)"
            )
        )


def drop_word_search(connection: Connection) -> None:
    """Remove what `create_word_search` made."""
    for name in _TRIGGERS:
        connection.execute(text(f"DROP TRIGGER IF EXISTS {name} ON samples"))
    connection.execute(text(f"DROP FUNCTION IF EXISTS {_ADD_WORDS}()"))
    connection.execute(text(f"DROP INDEX IF EXISTS {WORDS_INDEX}"))
    connection.execute(text(f"DROP TABLE IF EXISTS {VOCABULARY}"))
    connection.execute(text(f"DROP FUNCTION IF EXISTS {WORDS_FUNCTION}(text)"))
