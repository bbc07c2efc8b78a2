"""PostgreSQL's word index for the completions' `q` (store/word_search.py): the cases
where a word index could miss what a substring search finds. Every answer must equal
the scan's (and, on SQLite, the FTS5 index's): long runs, pieces inside words, pieces
found in too many words, a vocabulary kept through rewrites, text without spaces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.history import samples_words
from training_platform.history.samples_search import indexed_search

URL = "/api/monitoring/run1/samples"
SYNC = "/api/monitoring/run1/metrics/sync"

COMPLETIONS = [
    "x" * 30 + "needleinalongrun" + "y" * 30,  # one run of 76 word characters
    "the answer is 42, so the_answer_is=42",
    "reanswered: unanswerable questions",
    "数学题的答案是四十二",  # no spaces: one long run
    "Plain words: Wombat, QUOKKA and numbat.",
    "foo-bar/baz.qux",
    "~".join(["abc"] * 2_000) + " and " + "q" * 3_000,  # tildes: separators, not one key
]
QUERIES = [
    "needleinalongrun",  # inside a run longer than the index keeps
    "alongrun" + "y" * 10,
    "answer",  # inside "reanswered", "unanswerable", "the_answer_is"
    "SWER IS 4",  # pieces ending and starting inside words
    "e_answer_",
    "的答案是",  # inside a run of CJK characters
    "wombat, quok",
    "o-bar/b",
    "r/baz.q",
    "abc~abc~abc and",
    "q" * 100,  # only in a run longer than the index keeps
    "missing",
]


def _write(run1: Path, completions: list[str], step: int = 0) -> None:
    samples = [
        build_sample(step, index, f"prompt {index}", completion)
        for index, completion in enumerate(completions)
    ]
    path = run1.parent / "run1_samples.jsonl"
    path.write_bytes(b"".join(encode_record(sample) for sample in samples))


def _found(client: TestClient, q: str) -> list[str]:
    response = client.get(URL, params={"q": q, "limit": 100})
    assert response.status_code == 200, response.text
    return [sample["completion"] for sample in response.json()["samples"]]


def _lower(value: str) -> str:
    return value.translate(
        str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
    )


@pytest.fixture
def stored(client: TestClient, run1: Path) -> None:
    _write(run1, COMPLETIONS)
    assert client.post(SYNC).status_code == 200


@pytest.mark.parametrize("q", QUERIES)
def test_q_finds_what_the_substring_search_finds(
    stored: None, client: TestClient, session_factory: sessionmaker[Session], q: str
) -> None:
    expected = [c for c in COMPLETIONS if _lower(q) in _lower(c)]
    assert _found(client, q) == expected
    with session_factory() as session:
        indexed = indexed_search(session, "run1", q) is not None
    # Each of these has a piece of 3 characters or more: the index answers.
    assert indexed


def test_a_piece_in_too_many_words_is_left_out_not_lost(
    stored: None,
    client: TestClient,
    session_factory: sessionmaker[Session],
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(samples_words, "MAX_WORDS", 1)  # "answer" is in 3 words
    assert _found(client, "answer") == [COMPLETIONS[1], COMPLETIONS[2]]
    if engine.dialect.name == "postgresql":
        with session_factory() as session:
            assert samples_words.words_containing(session, "answer") is None
            assert samples_words.completions_with_words_of(session, "answer") is None
            assert indexed_search(session, "run1", "answer") is None  # the scan answers
            # Another piece still narrows: the index answers.
            assert indexed_search(session, "run1", "answer is 42, so the_answer") is not None
    assert _found(client, "answer is 42, so the_answer") == [COMPLETIONS[1]]


def test_the_vocabulary_learns_the_words_of_a_rewritten_step(
    stored: None, client: TestClient, run1: Path, engine: Engine
) -> None:
    assert _found(client, "zebrafish") == []
    rewritten = ["a zebrafish swam", *COMPLETIONS[1:]]
    _write(run1, rewritten)  # the same (step, index) keys: an upsert of each row
    assert client.post(SYNC).status_code == 200
    assert _found(client, "ZEBRA") == ["a zebrafish swam"]
    assert _found(client, "needleinalongrun") == []
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            words = connection.execute(
                text("SELECT word FROM sample_words WHERE word LIKE 'zebra%'")
            ).scalars()
            assert list(words) == ["zebrafish"]


def test_pieces_are_cut_by_the_database(
    session_factory: sessionmaker[Session], engine: Engine
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the word index is PostgreSQL's (SQLite's FTS5 index has trigrams)")
    with session_factory() as session:
        assert samples_words.pieces(session, "The ANSWER_is: 42!!") == ["answer_is", "the"]
        assert samples_words.pieces(session, "a*b !!!") == []  # nothing to look up


def _sample_words(engine: Engine) -> Any:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM sample_words")).scalar_one()


def test_long_runs_stay_out_of_the_vocabulary(stored: None, engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the vocabulary is PostgreSQL's")
    with engine.connect() as connection:
        longest = connection.execute(text("SELECT max(length(word)) FROM sample_words"))
        assert longest.scalar_one() <= 48
        assert _sample_words(engine) > 0
