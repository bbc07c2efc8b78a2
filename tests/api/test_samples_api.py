"""`GET /api/monitoring/{job_id}/samples` and `.../samples/steps`: filters, sorts, keyset
paging, cursors, per-step figures, errors; on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.history.samples_query import SampleFilter, sample_page

NAN, INF = math.nan, math.inf
A = "What is 2+2?"
B = "Spell it"
C = "Give 100% effort"
URL = "/api/monitoring/run1/samples"
STEPS_URL = "/api/monitoring/run1/samples/steps"

# (step, index, prompt, completion, reward, options); lengths noted where they matter.
ROWS: list[tuple[int, int, str, str, float | None, dict[str, Any]]] = [
    (0, 0, A, "The answer is 4", 1.0, {"group": "g0", "response_length": 5,
     "finish_reason": "stop", "rewards": {"acc": 1.0, "fmt": 1.0}, "extra": {"gt": "4"},
     "timestamp": 10.0}),
    (0, 1, A, "I am 100% sure: 5", 0.0, {"group": "g0", "finish_reason": "stop"}),  # 17 chars
    (0, 2, A, "NaN city", NAN, {"group": "g0", "response_length": 50, "finish_reason": "length"}),
    (0, 3, A, "no reward here", None, {"group": "g0"}),  # 14 chars
    (1, 0, B, "under_score", 0.5, {"group": "g1", "response_length": 12,
     "finish_reason": "length", "rewards": {"acc": 0.5, "fmt": INF}}),
    (1, 1, B, "UNDERSCORE", -INF, {"group": "g1", "finish_reason": "stop"}),  # 10
    (1, 2, B, "underXscore", 1.0, {"group": "g1", "finish_reason": "stop"}),  # 11
    (1, 3, A, "four", 0.25, {"group": "g2", "finish_reason": "stop"}),  # 4
    (3, 0, C, "Trying hard", INF, {"finish_reason": "stop"}),  # 11
    (3, 1, A, "4", 0.0, {"response_length": 7, "finish_reason": "length"}),
    (4, 0, B, "x", None, {}),  # 1
    (4, 1, A, "1000 apples", None, {}),  # 11
]  # fmt: skip


def _length(row: tuple[int, int, str, str, float | None, dict[str, Any]]) -> int:
    given = row[5].get("response_length")
    return len(row[3]) if given is None else int(given)


def _finite(reward: float | None) -> float | None:
    return reward if reward is not None and math.isfinite(reward) else None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def samples_job(client: TestClient, run1: Path) -> TestClient:
    lines = [
        encode_record(build_sample(step, index, prompt, completion, reward=reward, **options))
        for step, index, prompt, completion, reward, options in ROWS
    ]
    (run1.parent / "run1_samples.jsonl").write_bytes(b"".join(lines))
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    return client


def keys(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [(sample["step"], sample["index"]) for sample in body["samples"]]


def get(client: TestClient, url: str = URL, **params: Any) -> dict[str, Any]:
    response = client.get(url, params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_samples_have_the_lines_shape_and_non_finite_rewards_are_strings(
    samples_job: TestClient,
) -> None:
    response = samples_job.get(URL, params={"step": 0})

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in an API response")

    body = json.loads(response.text, parse_constant=refuse)
    assert body["job_id"] == "run1" and body["next_cursor"] is None
    first, second, third, fourth = body["samples"]
    assert first == {
        "step": 0,
        "index": 0,
        "timestamp": 10.0,
        "prompt": A,
        "prompt_digest": digest(A),
        "completion": "The answer is 4",
        "reward": 1.0,
        "rewards": {"acc": 1.0, "fmt": 1.0},
        "group": "g0",
        "response_length": 5,
        "length": 5,
        "finish_reason": "stop",
        "extra": {"gt": "4"},
    }
    assert (second["response_length"], second["length"]) == (None, len("I am 100% sure: 5"))
    assert third["reward"] == "NaN" and third["length"] == 50
    assert fourth["reward"] is None and fourth["finish_reason"] is None
    assert fourth["rewards"] is None and fourth["group"] == "g0"
    step1 = get(samples_job, step=1)["samples"]
    assert step1[0]["rewards"] == {"acc": 0.5, "fmt": "Infinity"}
    assert step1[1]["reward"] == "-Infinity"
    assert get(samples_job, step=3)["samples"][0]["reward"] == "Infinity"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"step": 1}, [(1, 0), (1, 1), (1, 2), (1, 3)]),
        ({"step": 2}, []),
        ({"start_step": 1, "end_step": 3}, [(1, 0), (1, 1), (1, 2), (1, 3), (3, 0), (3, 1)]),
        ({"start_step": 3}, [(3, 0), (3, 1), (4, 0), (4, 1)]),
        ({"end_step": 0}, [(0, 0), (0, 1), (0, 2), (0, 3)]),
        ({"step": 1, "start_step": 2}, []),
        ({"group": "g1"}, [(1, 0), (1, 1), (1, 2)]),
        ({"group": "g"}, []),  # exact, not a prefix
        ({"prompt": digest(A)}, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (3, 1), (4, 1)]),
        ({"prompt": digest(A), "start_step": 1}, [(1, 3), (3, 1), (4, 1)]),
        ({"prompt": digest("never asked")}, []),
        ({"min_reward": 0.25}, [(0, 0), (1, 0), (1, 2), (1, 3)]),
        ({"max_reward": 0.25}, [(0, 1), (1, 3), (3, 1)]),
        ({"min_reward": 0.25, "max_reward": 0.5}, [(1, 0), (1, 3)]),
        ({"min_reward": -1e308}, [(0, 0), (0, 1), (1, 0), (1, 2), (1, 3), (3, 1)]),
        ({"finish_reason": "length"}, [(0, 2), (1, 0), (3, 1)]),
        ({"finish_reason": "stop", "group": "g0"}, [(0, 0), (0, 1)]),
    ],
)
def test_each_filter_selects_exactly_its_samples(
    samples_job: TestClient, params: dict[str, Any], expected: list[tuple[int, int]]
) -> None:
    assert keys(get(samples_job, **params)) == expected


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("100%", [(0, 1), (3, 0)]),  # not "1000 apples": % is literal
        ("%", [(0, 1), (3, 0)]),  # the prompt "Give 100% effort" matches too
        ("r_s", [(1, 0)]),  # not "underXscore": _ is literal
        ("_", [(1, 0)]),
        ("UNDER", [(1, 0), (1, 1), (1, 2)]),  # case-insensitive
        ("what IS 2+2", [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (3, 1), (4, 1)]),  # the prompt
        ("nan CITY", [(0, 2)]),
        ("/", []),  # the escape character is literal too
        ("\\", []),
        ("'; drop table samples; --", []),
    ],
)
def test_q_is_a_literal_case_insensitive_substring_of_prompt_or_completion(
    samples_job: TestClient, q: str, expected: list[tuple[int, int]]
) -> None:
    assert keys(get(samples_job, q=q)) == expected


def test_q_combines_with_the_other_filters(samples_job: TestClient) -> None:
    assert keys(get(samples_job, q="what is", finish_reason="length")) == [(0, 2), (3, 1)]
    assert keys(get(samples_job, q="4", sort="length", order="desc")) == [(3, 1), (0, 0)]


def _expected_order(sort: str, order: str) -> list[tuple[int, int]]:
    def value(row: tuple[int, int, str, str, float | None, dict[str, Any]]) -> float | None:
        if sort == "reward":
            return _finite(row[4])
        return _length(row) if sort == "length" else 0

    rows = [(value(row), row[0], row[1]) for row in ROWS]
    valued = sorted(r for r in rows if r[0] is not None)
    nulls = sorted(r for r in rows if r[0] is None)
    if order == "desc":
        valued.reverse()
        nulls.reverse()
    return [(step, index) for _, step, index in valued + nulls]


def _all_pages(client: TestClient, **params: Any) -> list[list[tuple[int, int]]]:
    pages = []
    cursor = None
    for _ in range(len(ROWS) + 2):
        body = get(client, **params, **({} if cursor is None else {"cursor": cursor}))
        assert len(body["samples"]) <= params["limit"]
        pages.append(keys(body))
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("sort", ["step", "reward", "length"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_every_sort_pages_through_every_sample_once_nulls_last(
    samples_job: TestClient, sort: str, order: str
) -> None:
    expected = _expected_order(sort, order)
    params = {} if (sort, order) == ("step", "asc") else {"sort": sort, "order": order}
    assert keys(get(samples_job, limit=1000, **params)) == expected
    for limit in (1, 2, 5, 12):
        pages = _all_pages(samples_job, limit=limit, **params)
        assert [key for page in pages for key in page] == expected, limit
        # Full pages until the last; no empty last page (it would be a wasted request).
        assert all(len(page) == limit for page in pages[:-1]) and pages[-1], limit


def test_reward_order_by_hand(samples_job: TestClient) -> None:
    asc = keys(get(samples_job, sort="reward"))
    assert asc == [(0, 1), (3, 1), (1, 3), (1, 0), (0, 0), (1, 2),
                   (0, 2), (0, 3), (1, 1), (3, 0), (4, 0), (4, 1)]  # fmt: skip
    desc = keys(get(samples_job, sort="reward", order="desc"))
    assert desc == [(1, 2), (0, 0), (1, 0), (1, 3), (3, 1), (0, 1),
                    (4, 1), (4, 0), (3, 0), (1, 1), (0, 3), (0, 2)]  # fmt: skip
    lengths = [s["length"] for s in get(samples_job, sort="length", order="desc")["samples"]]
    assert lengths == [50, 17, 14, 12, 11, 11, 11, 10, 7, 5, 4, 1]


def test_paging_with_a_filter_keeps_the_filter(samples_job: TestClient) -> None:
    pages = _all_pages(samples_job, limit=2, sort="reward", prompt=digest(A))
    assert [key for page in pages for key in page] == [
        (0, 1), (3, 1), (1, 3), (0, 0), (0, 2), (0, 3), (4, 1)
    ]  # fmt: skip


def test_a_page_ending_exactly_at_the_last_sample_has_no_cursor(samples_job: TestClient) -> None:
    assert get(samples_job, limit=12)["next_cursor"] is None
    assert get(samples_job, limit=11)["next_cursor"] is not None
    assert get(samples_job, step=1, limit=4)["next_cursor"] is None


def _flip(cursor: str, position: int) -> str:
    swapped = "A" if cursor[position] != "A" else "B"
    return cursor[:position] + swapped + cursor[position + 1 :]


def test_an_edited_or_foreign_cursor_is_422(samples_job: TestClient) -> None:
    cursor = get(samples_job, sort="reward", limit=2)["next_cursor"]
    assert isinstance(cursor, str)
    bad = [
        _flip(cursor, 0),
        _flip(cursor, len(cursor) // 2),
        _flip(cursor, len(cursor) - 1),
        cursor[:-1],
        cursor + "A",
        "abc",
        "é",
        "====",
        base64.urlsafe_b64encode(b'[1,"reward","asc",0.0,0,1]').decode(),  # no checksum
        "x" * 600,
    ]
    for text in bad:
        response = samples_job.get(URL, params={"sort": "reward", "limit": 2, "cursor": text})
        assert response.status_code == 422, (text, response.text)
    assert get(samples_job, sort="reward", limit=2, cursor=cursor)["samples"]


@pytest.mark.parametrize(
    ("sort", "order"), [("length", "asc"), ("step", "asc"), ("reward", "desc")]
)
def test_a_cursor_with_another_sort_or_order_is_422(
    samples_job: TestClient, sort: str, order: str
) -> None:
    cursor = get(samples_job, sort="reward", limit=2)["next_cursor"]
    response = samples_job.get(URL, params={"sort": sort, "order": order, "cursor": cursor})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_parameter"


def test_the_steps_summary_by_hand(samples_job: TestClient) -> None:
    body = get(samples_job, STEPS_URL)
    assert body["job_id"] == "run1" and body["next_start_step"] is None
    assert body["steps"] == [
        {"step": 0, "count": 4, "groups": 1, "reward_mean": 0.5, "reward_min": 0.0,
         "reward_max": 1.0, "length_mean": 21.5, "length_max": 50, "truncated": 1},
        {"step": 1, "count": 4, "groups": 2, "reward_mean": pytest.approx(1.75 / 3),
         "reward_min": 0.25, "reward_max": 1.0, "length_mean": 9.25, "length_max": 12,
         "truncated": 1},
        {"step": 3, "count": 2, "groups": 0, "reward_mean": 0.0, "reward_min": 0.0,
         "reward_max": 0.0, "length_mean": 9.0, "length_max": 11, "truncated": 1},
        {"step": 4, "count": 2, "groups": 0, "reward_mean": None, "reward_min": None,
         "reward_max": None, "length_mean": 6.0, "length_max": 11, "truncated": 0},
    ]  # fmt: skip


def test_the_steps_summary_pages_by_step(samples_job: TestClient) -> None:
    first = get(samples_job, STEPS_URL, limit=2)
    assert [s["step"] for s in first["steps"]] == [0, 1] and first["next_start_step"] == 3
    second = get(samples_job, STEPS_URL, limit=2, start_step=3)
    assert [s["step"] for s in second["steps"]] == [3, 4] and second["next_start_step"] is None
    ranged = get(samples_job, STEPS_URL, start_step=1, end_step=3)
    assert [s["step"] for s in ranged["steps"]] == [1, 3] and ranged["next_start_step"] is None
    assert get(samples_job, STEPS_URL, start_step=5)["steps"] == []


def test_a_job_without_samples_answers_empty(client: TestClient, run1: Path) -> None:
    assert get(client) == {"job_id": "run1", "samples": [], "next_cursor": None}
    assert get(client, STEPS_URL) == {"job_id": "run1", "steps": [], "next_start_step": None}


def test_an_unknown_job_is_404(client: TestClient) -> None:
    for url in ("/api/monitoring/nope/samples", "/api/monitoring/nope/samples/steps"):
        response = client.get(url)
        assert response.status_code == 404 and response.json()["code"] == "job_not_found"


@pytest.mark.parametrize(
    "params",
    [
        {"start_step": 3, "end_step": 2},
        {"step": -1},
        {"prompt": "abc"},
        {"prompt": digest(A).upper()},
        {"prompt": digest(A) + "0"},
        {"limit": 0},
        {"limit": 1001},
        {"q": ""},
        {"q": "x" * 201},
        {"sort": "prompt"},
        {"order": "up"},
        {"min_reward": "nan"},
        {"max_reward": "inf"},
        {"min_reward": "high"},
        {"cursor": ""},
        {"offset": 10},
        {"steps": 1},
    ],
)
def test_bad_parameters_are_422(samples_job: TestClient, params: dict[str, Any]) -> None:
    response = samples_job.get(URL, params=params)
    assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    "params",
    [{"start_step": 3, "end_step": 2}, {"limit": 0}, {"limit": 10_001}, {"step": 1}],
)
def test_bad_steps_parameters_are_422(samples_job: TestClient, params: dict[str, Any]) -> None:
    assert samples_job.get(STEPS_URL, params=params).status_code == 422


def test_a_page_is_one_bounded_keyset_query(
    samples_job: TestClient, engine: Engine, session_factory: sessionmaker[Session]
) -> None:
    """At most `limit` rows per statement, never an OFFSET; the step filter seeks the key."""
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "samples" in statement:
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        with session_factory() as session:
            first = sample_page(
                session, job_id="run1", where=SampleFilter(), sort="reward", limit=3
            )
            second = sample_page(
                session,
                job_id="run1",
                where=SampleFilter(),
                sort="reward",
                limit=3,
                cursor=first.next_cursor,
            )
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert [(s["step"], s["index"]) for s in first.samples + second.samples] == (
        _expected_order("reward", "asc")[:6]
    )
    assert statements and all(_no_offset(sql, args) for sql, args in statements)
    # Each page: the page itself (LIMIT 3) and whether more follow (LIMIT 1).
    assert len(statements) == 4
    for (page_sql, page_args), (more_sql, more_args) in zip(
        statements[::2], statements[1::2], strict=True
    ):
        assert "sample_prompts" in page_sql and "LIMIT" in page_sql.upper()
        assert 3 in _values(page_args) and 1 in _values(more_args)
        assert "sample_prompts" not in more_sql  # no join when no text is filtered


def _no_offset(sql: str, parameters: Any) -> bool:
    """No OFFSET, or SQLAlchemy's SQLite spelling of none (`LIMIT ? OFFSET ?` with 0)."""
    if "OFFSET" not in sql.upper():
        return True
    return sql.rstrip().endswith("OFFSET ?") and _values(parameters)[-1] == 0


def _values(parameters: Any) -> list[Any]:
    if isinstance(parameters, dict):
        return list(parameters.values())
    return list(parameters)
