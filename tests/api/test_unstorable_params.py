"""Every parameter of every route, walked from the OpenAPI document: a NUL byte
is a 422 naming the parameter, a single-valued parameter given twice is a 422.

Before: PostgreSQL answered `?project=%00` with a 500 (text cannot hold NUL),
SQLite's samples search matched every sample for `?q=%00` and failed with a
500 for `?q=a%00b`, and `?jobs=a&jobs=b` answered for `b` alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_jobs_api import write_job
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import SAMPLES_SUFFIX, build_sample

NUL_VALUES = ("\x00", "a\x00b", "abc\x00")


def _sync_with_samples(client: TestClient, metrics_dir: Path) -> None:
    write_job(metrics_dir, "run1", steps=3)
    with (metrics_dir / f"run1{SAMPLES_SUFFIX}").open("ab") as handle:
        for index in range(4):
            sample = build_sample(
                0, index, "What is 2+2?", f"abc answer {index}", reward=1.0, group="g0",
                finish_reason="stop",
            )  # fmt: skip
            handle.write(encode_record(sample))
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    assert client.get("/api/monitoring/run1/samples").json()["samples"]


def _operations(client: TestClient) -> list[tuple[str, str, list[dict[str, Any]]]]:
    spec = client.get("/openapi.json").json()
    return [
        (method.upper(), path, operation.get("parameters", []))
        for path, methods in spec["paths"].items()
        for method, operation in methods.items()
    ]


def _url(path: str) -> str:
    return path.replace("{job_id}", "run1").replace("{path}", "notes.txt")


def _is_sequence(parameter: dict[str, Any]) -> bool:
    schema = parameter["schema"]
    options = schema.get("anyOf", [schema])
    return any(option.get("type") == "array" for option in options)


def test_a_nul_byte_in_any_query_parameter_is_a_422_naming_it(
    client: TestClient, metrics_dir: Path
) -> None:
    _sync_with_samples(client, metrics_dir)
    tried = 0
    for method, path, parameters in _operations(client):
        for parameter in parameters:
            if parameter["in"] != "query":
                continue
            for value in NUL_VALUES:
                response = client.request(method, _url(path), params={parameter["name"]: value})
                where = f"{method} {path}?{parameter['name']}={value!r}"
                assert response.status_code == 422, (where, response.text)
                body = response.json()
                assert body["code"] == "validation_error", where
                assert ["query", parameter["name"]] in [e["loc"] for e in body["detail"]], where
                tried += 1
    assert tried >= 3 * 30  # every route's parameters were walked, not none


def test_a_nul_byte_in_any_path_parameter_is_a_422(client: TestClient, metrics_dir: Path) -> None:
    _sync_with_samples(client, metrics_dir)
    tried = 0
    for method, path, parameters in _operations(client):
        for parameter in parameters:
            if parameter["in"] != "path":
                continue
            url = _url(path.replace("{" + parameter["name"] + "}", "a%00b"))
            response = client.request(method, url)
            assert response.status_code == 422, (method, url, response.text)
            tried += 1
    assert tried >= 10  # every route with a job id or an artifact path


def test_the_probed_nul_queries_are_422_not_500_nor_a_match(
    client: TestClient, metrics_dir: Path
) -> None:
    _sync_with_samples(client, metrics_dir)
    probes = [
        "/api/jobs?project=%00",
        "/api/jobs?tag=a%00b",
        "/api/jobs?q=%00",
        "/api/monitoring/run1/samples?group=%00",
        "/api/monitoring/run1/samples?finish_reason=a%00b",
        "/api/monitoring/run1/samples?q=%00",
        "/api/monitoring/run1/samples?q=a%00b",
        "/api/monitoring/run1/samples?q=abc%00",
    ]
    for url in probes:
        response = client.get(url)
        assert response.status_code == 422, (url, response.text)
        assert "NUL" in response.json()["detail"][0]["msg"], url


# JSON text written by hand: orjson cannot write a lone surrogate.
@pytest.mark.parametrize("escaped", ["a\\u0000b", "\\ud800x"])
def test_unstorable_text_in_a_request_body_is_a_422_naming_the_field(
    client: TestClient, metrics_dir: Path, escaped: str
) -> None:
    write_job(metrics_dir, "run1")
    client.post("/api/monitoring/run1/metrics/sync")
    json_body = {"content-type": "application/json"}

    response = client.patch("/api/jobs/run1", content=f'{{"name": "{escaped}"}}', headers=json_body)

    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "name"]
    assert client.get("/api/jobs/run1").json()["name"] is None  # nothing was stored
    tags = client.patch("/api/jobs/run1", content=f'{{"tags": ["ok", "x{escaped}"]}}',
                        headers=json_body)  # fmt: skip
    assert tags.status_code == 422, tags.text
    ssh = client.post(
        "/api/jobs",
        json={"job_id": "remote", "ssh": {"host": "gpu-1", "username": "a\x00", "key_path": "k",
              "remote_dir": "/runs"}},
    )  # fmt: skip
    assert ssh.status_code == 422, ssh.text
    assert ssh.json()["detail"][0]["loc"][:3] == ["body", "ssh", "username"]


def test_a_single_valued_parameter_given_twice_is_a_422_naming_it(
    client: TestClient, metrics_dir: Path
) -> None:
    _sync_with_samples(client, metrics_dir)
    write_job(metrics_dir, "run2")
    client.post("/api/monitoring/run2/metrics/sync")

    response = client.get("/api/compare/config?jobs=run1&jobs=run2")

    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail[0]["loc"] == ["query", "jobs"]
    assert "one value" in detail[0]["msg"]
    assert client.get("/api/compare/config?jobs=run1,run2").status_code == 200


def test_every_single_valued_query_parameter_refuses_a_repeat_and_lists_take_one(
    client: TestClient, metrics_dir: Path
) -> None:
    _sync_with_samples(client, metrics_dir)
    lists = 0
    for method, path, parameters in _operations(client):
        for parameter in parameters:
            if parameter["in"] != "query":
                continue
            name = parameter["name"]
            response = client.request(method, _url(path), params=[(name, "1"), (name, "2")])
            where = f"{method} {path}?{name}=1&{name}=2"
            if _is_sequence(parameter):
                lists += 1
                assert ["query", name] not in _locs(response), where
            else:
                assert response.status_code == 422, where
                assert _locs(response) == [["query", name]], where
    assert lists >= 2  # /api/jobs: status and tag take several values


def test_jobs_filters_that_take_several_values_still_do(
    client: TestClient, metrics_dir: Path
) -> None:
    write_job(metrics_dir, "run1")
    client.post("/api/monitoring/run1/metrics/sync")
    response = client.get("/api/jobs?status=running&status=completed&status=stalled")
    assert response.status_code == 200, response.text


def _locs(response: Any) -> list[list[str]]:
    if response.status_code != 422:
        return []
    detail = response.json().get("detail")
    return [error["loc"] for error in detail] if isinstance(detail, list) else []
