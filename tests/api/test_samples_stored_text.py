"""The completions stored zlib-compressed on SQLite, as text on PostgreSQL
(`store/stored_text.py`): the API gives back the exact text, `q` still finds
every substring, and the FTS5 index stays equal to the rows through rewrites
and a job's deletion."""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.history import samples_search
from training_platform.store.stored_text import StoredText, pack_text, unpack_text

URL = "/api/monitoring/run1/samples"
SYNC = "/api/monitoring/run1/metrics/sync"
# FTS5's check of the index against its external content (the view of the
# inflated completions). The plain 'integrity-check' (rank 0) checks only the
# index's own structure on SQLite 3.40: it passes on a stale index.
INTEGRITY_CHECK = "INSERT INTO samples_fts(samples_fts, rank) VALUES ('integrity-check', 1)"

_WORDS = [
    "we",
    "add",
    "the",
    "two",
    "numbers",
    "then",
    "check",
    "the",
    "sum",
    "again",
    "so",
    "the",
    "answer",
    "is",
]


def _prose(seed: int, chars: int) -> str:
    """Reasoning-like prose of about `chars` characters (compressible, as a model's is)."""
    rng = random.Random(seed)
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < chars:
        words.append(rng.choice(_WORDS) if rng.random() < 0.9 else str(rng.randrange(1000)))
    return " ".join(words)


LONG_TEXTS = [
    _prose(1, 1_500),
    "日本語の説明と計算の手順。" * 60,  # 3 bytes per character in UTF-8
    "emoji 🙂🚀 and text " * 60,  # 4-byte characters
]


@pytest.mark.parametrize("value", LONG_TEXTS, ids=["ascii", "cjk", "emoji"])
def test_a_long_text_packs_smaller_and_unpacks_to_itself(value: str) -> None:
    packed = pack_text(value)
    assert isinstance(packed, bytes) and len(packed) < len(value.encode("utf-8"))
    assert zlib.decompress(packed).decode("utf-8") == value  # a plain zlib stream
    assert unpack_text(packed) == value


@pytest.mark.parametrize("value", ["", "ok", "The answer is 4", "🙂"])
def test_a_text_zlib_would_not_shrink_is_stored_as_it_is(value: str) -> None:
    assert pack_text(value) == value and isinstance(pack_text(value), str)
    assert unpack_text(pack_text(value)) == value


def test_unpack_passes_text_and_none_through() -> None:
    """Rows stored before the compression hold text: read as it is."""
    assert unpack_text("stored before 0010, 日本語 🙂") == "stored before 0010, 日本語 🙂"
    assert unpack_text("") == ""
    assert unpack_text(None) is None


def test_stored_text_converts_on_sqlite_only() -> None:
    column, value = StoredText(), LONG_TEXTS[0]
    on_sqlite = column.process_bind_param(value, sqlite.dialect())
    assert isinstance(on_sqlite, bytes) and unpack_text(on_sqlite) == value
    assert column.process_result_value(on_sqlite, sqlite.dialect()) == value
    assert column.process_result_value("old text", sqlite.dialect()) == "old text"
    assert column.process_bind_param(value, postgresql.dialect()) == value
    assert column.process_result_value(value, postgresql.dialect()) == value
    assert column.process_bind_param(None, sqlite.dialect()) is None


# --- through ingestion and the API, on both databases ------------------------------------

MIDDLE = "Quetzalcoatl"
MIDDLE_TEXT = _prose(2, 1_500) + f" {MIDDLE} " + _prose(3, 1_500)


def _samples(marker: str = "") -> list[dict[str, Any]]:
    """Step 0: a long completion with MIDDLE in its middle, a short one, the long
    texts; steps 1-2: more prose, each starting with `marker`."""
    completions = [MIDDLE_TEXT, "ok", *LONG_TEXTS]
    samples = [build_sample(0, i, "Solve it", c) for i, c in enumerate(completions)]
    for step in (1, 2):
        for index in range(4):
            completion = marker + _prose(10 * step + index, 1_200)
            samples.append(build_sample(step, index, f"prompt {step}", completion))
    return samples


def _write(run1: Path, samples: list[dict[str, Any]], mode: str = "wb") -> None:
    with (run1.parent / "run1_samples.jsonl").open(mode) as handle:
        handle.write(b"".join(encode_record(sample) for sample in samples))


def _sync(client: TestClient) -> None:
    assert client.post(SYNC).status_code == 200


def _found(client: TestClient, **params: Any) -> list[tuple[int, int]]:
    response = client.get(URL, params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    return [(sample["step"], sample["index"]) for sample in response.json()["samples"]]


def _check_index(engine: Engine) -> None:
    """SQLite: FTS5 rereads every row's inflated text and compares the index."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            connection.execute(text(INTEGRITY_CHECK))


def test_completions_are_stored_compressed_on_sqlite_only_and_served_exactly(
    client: TestClient, run1: Path, engine: Engine
) -> None:
    samples = _samples()
    _write(run1, samples)
    _sync(client)
    on_sqlite = engine.dialect.name == "sqlite"
    kind = "typeof(completion)" if on_sqlite else "pg_typeof(completion)::text"
    with engine.connect() as connection:
        query = f"SELECT {kind}, completion FROM samples ORDER BY step, sample_index"
        stored = connection.execute(text(query)).all()
    texts = [sample["completion"] for sample in samples]
    if on_sqlite:
        for (kind, value), completion in zip(stored, texts, strict=True):
            if completion == "ok":  # zlib would make it longer: kept as text
                assert (kind, value) == ("text", "ok")
                continue
            assert kind == "blob" and len(value) < len(completion.encode("utf-8")) * 0.7
            assert zlib.decompress(value).decode("utf-8") == completion
    else:  # PostgreSQL: the text as it was (TOAST compresses it itself)
        assert stored == [("text", completion) for completion in texts]
    served = client.get(URL, params={"limit": 1000}).json()["samples"]
    assert [sample["completion"] for sample in served] == texts


@pytest.mark.parametrize("few", [samples_search.FEW_CANDIDATES, 2], ids=["index", "scan"])
def test_q_finds_a_word_in_the_middle_of_a_long_completion(
    client: TestClient, run1: Path, monkeypatch: pytest.MonkeyPatch, few: int
) -> None:
    """Through the index, and (`few` 2: every word counts as common) through the scan."""
    monkeypatch.setattr(samples_search, "FEW_CANDIDATES", few)
    _write(run1, _samples())
    _sync(client)
    assert _found(client, q="quetzalCOATL") == [(0, 0)]
    assert _found(client, q=f" {MIDDLE} ") == [(0, 0)]
    assert _found(client, q="計算の手順") == [(0, 3)]
    assert _found(client, q="🙂🚀") == [(0, 4)]
    assert _found(client, q="OK") == [(0, 1)]  # the short one, stored as text
    assert _found(client, q="Quetzalcoatls") == []
    assert _found(client, q="no such words") == []


def test_rewrites_and_a_deletion_keep_the_index_equal_to_the_rows(
    client: TestClient, run1: Path, engine: Engine
) -> None:
    _write(run1, _samples("quokkaold ")[5:])  # steps 1 and 2, each with the marker
    _sync(client)
    _check_index(engine)
    _write(run1, _samples("wombatnew ")[5:])  # truncated and rewritten: read again from 0
    _sync(client)
    assert _found(client, q="quokkaold") == []
    assert len(_found(client, q="wombatnew")) == 8
    _check_index(engine)
    # Newer lines for step 1 (a resumed run): they win, through the upsert's update.
    newest = [build_sample(1, i, "prompt 1", _prose(i, 900) + " emunewest") for i in range(4)]
    _write(run1, newest, mode="ab")
    _sync(client)
    assert _found(client, q="emunewest") == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert _found(client, q="wombatnew") == [(2, 0), (2, 1), (2, 2), (2, 3)]
    _check_index(engine)
    assert client.delete("/api/jobs/run1").status_code in (200, 204)
    _check_index(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM samples")).scalar_one() == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # FTS5 is SQLite's
def test_the_integrity_check_sees_a_stale_index(
    client: TestClient, run1: Path, engine: Engine
) -> None:
    """The check above can fail: a completion changed behind the triggers' back."""
    _write(run1, _samples())
    _sync(client)
    with engine.begin() as connection:
        connection.execute(text("DROP TRIGGER samples_fts_update"))
        connection.execute(
            text("UPDATE samples SET completion = :c WHERE step = 0 AND sample_index = 0"),
            {"c": pack_text(_prose(99, 1_500))},
        )
    with pytest.raises(DatabaseError, match="malformed"):
        _check_index(engine)
