"""The samples' text search `q` through its trigram indexes (FTS5 on SQLite, pg_trgm on
PostgreSQL): the same answers as a scan, every character literal, filters, sorts and
pages; no stale index rows after a rewrite or a deletion; the plan uses the index."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from tests.conftest import BACKENDS
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.history import samples_search
from training_platform.history.samples_query import SampleFilter, sample_page
from training_platform.store.database import alembic_config, make_engine
from training_platform.store.text_search import create_text_search, fts_match

URL = "/api/monitoring/run1/samples"
SYNC = "/api/monitoring/run1/metrics/sync"

# Texts with every character the search must take literally.
PROMPTS = ["Solve: a*b = 12", 'Say "hello" (twice)', "It's 100% sure_ish", "Naïve Café 日本語"]
COMPLETIONS = [
    "We went to Zanzibar. AND then NEAR home",
    'He said "hello" and left',
    "under_score, not underXscore",
    "percent: 50%! col:umn ^caret",
    "emoji 🙂🙂🙂 here, naïve CAFÉ",
    "plain words only",
]
QUERIES = [
    "zanzibar",  # in a completion, written Zanzibar
    "SOLVE",  # in a prompt only
    '"hello"',  # double quotes: FTS5 query syntax, escaped
    'y "h',
    "a*b",  # FTS5's prefix operator
    "it's",  # a single quote
    "100%",  # LIKE's wildcards match only themselves
    "under_score",
    "_sc",
    "%",
    "_",
    "AND",  # FTS5 keywords
    "near home",
    "col:umn",  # FTS5's column filter
    "^car",
    "(tw",
    "日本語",  # three characters, one trigram
    "🙂🙂🙂",
    "NAïVE CAf",  # ASCII case differs, the other letters as written
    "xy",  # two characters: the scan
    '"h',
    "no such text",
]


def _lower(value: str) -> str:
    """ASCII case folding: what both databases fold (docs/contract.md)."""
    return value.translate(
        str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
    )


def _samples(steps: int, marker: str = "") -> list[dict[str, Any]]:
    rng = random.Random(7)
    samples = []
    for step in range(steps):
        for index in range(4):
            completion = COMPLETIONS[(step * 4 + index) % len(COMPLETIONS)] + marker
            samples.append(
                build_sample(
                    step,
                    index,
                    PROMPTS[(step + index // 2) % len(PROMPTS)],
                    completion,
                    reward=rng.choice([None, 0.0, 0.5, 1.0]),
                    group=f"g{step}-{index // 2}",
                    finish_reason=rng.choice(["stop", "length"]),
                    response_length=rng.randrange(100),
                )
            )
    return samples


def _write(run1: Path, samples: list[dict[str, Any]]) -> None:
    path = run1.parent / "run1_samples.jsonl"
    path.write_bytes(b"".join(encode_record(sample) for sample in samples))


def _sync(client: TestClient) -> None:
    assert client.post(SYNC).status_code == 200


@pytest.fixture
def searchable(client: TestClient, run1: Path) -> list[dict[str, Any]]:
    samples = _samples(12)
    _write(run1, samples)
    _sync(client)
    return samples


def _matching(samples: list[dict[str, Any]], q: str) -> list[dict[str, Any]]:
    needle = _lower(q)
    return [
        s for s in samples if needle in _lower(s["prompt"]) or needle in _lower(s["completion"])
    ]


def _pages(client: TestClient, **params: Any) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    cursor = None
    while True:
        response = client.get(URL, params={**params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        found += [(sample["step"], sample["index"]) for sample in body["samples"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return found


@pytest.mark.parametrize("few", [samples_search.FEW_CANDIDATES, 2], ids=["index", "common"])
def test_q_finds_every_literal_substring_ignoring_ascii_case(
    searchable: list[dict[str, Any]],
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    few: int,
) -> None:
    """Through the index, and (`few` 2: every word counts as common) through the scan."""
    monkeypatch.setattr(samples_search, "FEW_CANDIDATES", few)
    for q in QUERIES:
        expected = [(s["step"], s["index"]) for s in _matching(searchable, q)]
        assert _pages(client, q=q, limit=1000) == expected, q
    assert _matching(searchable, "zanzibar") and _matching(searchable, "SOLVE")
    assert not _matching(searchable, "no such text")


@pytest.mark.parametrize("few", [samples_search.FEW_CANDIDATES, 2], ids=["index", "common"])
def test_q_pages_through_every_sort_and_filter_exactly_once(
    searchable: list[dict[str, Any]],
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    few: int,
) -> None:
    monkeypatch.setattr(samples_search, "FEW_CANDIDATES", few)
    filters: list[dict[str, Any]] = [
        {},
        {"start_step": 3, "end_step": 9},
        {"group": "g4-1"},
        {"finish_reason": "stop", "min_reward": 0.5},
    ]
    for q in ("hello", "e"):
        for where in filters:
            expected = {
                (s["step"], s["index"]) for s in _matching(searchable, q) if _kept(s, where)
            }
            for sort in ("step", "reward", "length"):
                for order in ("asc", "desc"):
                    got = _pages(client, q=q, sort=sort, order=order, limit=4, **where)
                    assert sorted(got) == sorted(expected) and len(got) == len(expected), (
                        q, where, sort, order,
                    )  # fmt: skip
                    if sort == "step":
                        assert got == sorted(expected, reverse=order == "desc")


def _kept(sample: dict[str, Any], where: dict[str, Any]) -> bool:
    step, reward = sample["step"], sample.get("reward")
    if "step" in where and step != where["step"]:
        return False
    if not where.get("start_step", 0) <= step <= where.get("end_step", 10**9):
        return False
    if "group" in where and sample.get("group") != where["group"]:
        return False
    if "min_reward" in where and (reward is None or reward < where["min_reward"]):
        return False
    if "max_reward" in where and (reward is None or reward > where["max_reward"]):
        return False
    return "finish_reason" not in where or sample.get("finish_reason") == where["finish_reason"]


def _fts_rows(engine: Engine, table: str, needle: str) -> int:
    with engine.connect() as connection:
        query = text(f"SELECT count(*) FROM {table} WHERE {table} MATCH :m")
        return int(connection.execute(query, {"m": fts_match(needle)}).scalar_one())


def test_a_rewritten_file_leaves_no_stale_index_rows(
    client: TestClient, run1: Path, engine: Engine
) -> None:
    _write(run1, _samples(3, " quokkaold"))
    _sync(client)
    assert len(_pages(client, q="QUOKKAOLD")) == 12
    _write(run1, _samples(3, " wombatnew"))  # truncated and rewritten: read again from 0
    _sync(client)
    assert _pages(client, q="quokkaold") == []
    assert len(_pages(client, q="wombatnew")) == 12
    if engine.dialect.name == "sqlite":  # the FTS index itself forgot the old text
        assert _fts_rows(engine, "samples_fts", "quokkaold") == 0
        assert _fts_rows(engine, "samples_fts", "wombatnew") == 12


def test_a_deleted_job_leaves_nothing_in_the_index(
    searchable: list[dict[str, Any]], client: TestClient, engine: Engine
) -> None:
    assert client.delete("/api/jobs/run1").status_code in (200, 204)
    if engine.dialect.name == "sqlite":
        assert _fts_rows(engine, "samples_fts", "zanzibar") == 0
        assert _fts_rows(engine, "sample_prompts_fts", "solve") == 0
        with engine.connect() as connection:  # FTS5's own check: index == rows
            connection.execute(
                text("INSERT INTO samples_fts(samples_fts) VALUES ('integrity-check')")
            )
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM samples")).scalar_one() == 0


def _statements(engine: Engine) -> tuple[list[tuple[str, Any]], Callable[[], None]]:
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    return seen, lambda: event.remove(engine, "before_cursor_execute", record)


def test_the_page_query_plans_through_the_text_indexes(
    searchable: list[dict[str, Any]], engine: Engine, session_factory: sessionmaker[Session]
) -> None:
    """Fails if `q` goes back to a scan: the page's plan names the index of each text."""
    if engine.dialect.name == "postgresql":
        _many_rows(engine)  # so that the planner would rather scan than use no index
    seen, stop = _statements(engine)
    try:
        with session_factory() as session:
            page = sample_page(session, job_id="run1", where=SampleFilter(q="zanzibar"), limit=50)
    finally:
        stop()
    assert len(page.samples) == len(_matching(searchable, "zanzibar"))
    statement, parameters = next((s, p) for s, p in seen if "sample_prompts.digest" in s)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statement, parameters)
            plan = " ".join(str(row[3]) for row in cursor.fetchall())
            assert "samples_fts" in plan and "sample_prompts_fts" in plan, plan
        else:
            cursor.execute("EXPLAIN " + statement, parameters)
            plan = " ".join(str(row[0]) for row in cursor.fetchall())
            assert "ix_samples_completion_words" in plan, plan
            # The prompts' ILIKE stands alone on sample_prompts (its index may serve
            # it; 4,000 prompts are still read faster without), never ORed with the
            # completion's across the join, which no index can serve.
            assert "(text ~~* '%zanzibar%'::text)" in plan, plan
            assert " OR " not in plan, plan
    finally:
        raw.close()


def _many_rows(engine: Engine) -> None:
    """10,000 more samples and 4,000 more prompts in SQL, then ANALYZE."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO sample_prompts (job_id, digest, text) SELECT 'run1', md5(g::text),"
                " 'prompt ' || md5(g::text) || repeat(' filler', 10)"
                " FROM generate_series(1, 4000) g"
            )
        )
        connection.execute(
            text(
                "INSERT INTO samples (job_id, step, sample_index, prompt_id, completion,"
                " completion_chars, received_at)"
                " SELECT 'run1', 1000 + g / 8, g % 8, (SELECT min(id) FROM sample_prompts),"
                " md5(g::text) || repeat(' more filler', 20), 300, 0"
                " FROM generate_series(0, 9999) g"
            )
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("ANALYZE samples"))
        connection.execute(text("ANALYZE sample_prompts"))


@pytest.fixture(params=BACKENDS)
def empty_url(
    request: pytest.FixtureRequest, tmp_path: Path, scratch_postgres: Callable[[], str]
) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return scratch_postgres()


def test_0006_indexes_the_samples_already_stored_and_downgrades(empty_url: str) -> None:
    config = alembic_config(empty_url)
    command.upgrade(config, "0005")
    engine = make_engine(empty_url)
    inserts = [
        "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected, created_at)"
        " VALUES ('run1', 'local', true, 'running', false, 1.0)",
        "INSERT INTO sample_prompts (id, job_id, digest, text)"
        " VALUES (1, 'run1', 'd', 'Old prompt')",
        "INSERT INTO samples (job_id, step, sample_index, prompt_id, completion, completion_chars,"
        " received_at) VALUES ('run1', 0, 0, 1, 'stored before Zanzibar', 22, 1.0)",
    ]
    try:
        with engine.begin() as connection:
            for insert in inserts:
                connection.execute(text(insert))
        command.upgrade(config, "head")
        factory = sessionmaker(bind=engine)
        with factory() as session:
            for q in ("ZANZIBAR", "old PROMPT"):
                found = sample_page(session, job_id="run1", where=SampleFilter(q=q), limit=10)
                assert [s["completion"] for s in found.samples] == ["stored before Zanzibar"]
        if engine.dialect.name == "sqlite":
            assert _fts_rows(engine, "samples_fts", "zanzibar") == 1
        command.downgrade(config, "0005")
        names = (
            "SELECT name FROM sqlite_master"
            if engine.dialect.name == "sqlite"
            else ("SELECT indexname FROM pg_indexes")
        )
        with engine.connect() as connection:
            left = {row[0] for row in connection.execute(text(names))}
        assert not {n for n in left if "fts" in n or "trgm" in n}
        command.upgrade(config, "head")
    finally:
        engine.dispose()


def test_without_pg_trgm_rights_the_migration_warns_and_q_still_answers(
    scratch_postgres: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = scratch_postgres()
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            # A role that may not create extensions here (a built-in one, PostgreSQL 14+).
            connection.execute(text("SET LOCAL ROLE pg_read_all_data"))
            with caplog.at_level(logging.WARNING):
                assert create_text_search(connection) is False
            connection.execute(text("SELECT 1"))  # the transaction is still usable
        assert "pg_trgm" in caplog.text
    finally:
        engine.dispose()
