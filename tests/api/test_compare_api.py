"""`GET /api/compare` and `/api/compare/config`: runs side by side, on both databases."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from training_platform.api.main import create_app
from training_platform.settings import Settings

T0 = 1_767_268_800.0


def write_run(
    metrics_dir: Path, job_id: str, records: list[dict[str, Any]], run: dict[str, Any] | None = None
) -> None:
    lines = "".join(json.dumps(record) + "\n" for record in records)
    (metrics_dir / f"{job_id}_metrics.jsonl").write_text(lines)
    if run is not None:
        (metrics_dir / f"{job_id}_run.json").write_text(json.dumps({"job_id": job_id, **run}))


def loss_run(steps: int, value: Any = None, **extra: Any) -> list[dict[str, Any]]:
    """`steps` records: loss 1/(step+1) unless `value(step)` says otherwise, 2 s apart."""
    records = []
    for step in range(steps):
        loss = 1.0 / (step + 1) if value is None else value(step)
        record: dict[str, Any] = {
            "step": step,
            "timestamp": T0 + 2 * step,
            "loss": {"actor_loss": loss},
        }
        if extra:
            record["extra"] = {key: fn(step) for key, fn in extra.items()}
        records.append(record)
    return records


def sync(client: TestClient, *job_ids: str) -> None:
    for job_id in job_ids:
        assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200


def compare(client: TestClient, query: str) -> dict[str, Any]:
    answer = client.get(f"/api/compare?{query}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's debiased EMA, written out plainly as the reference."""
    out, last = [], 0.0
    for count, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**count))
    return out


def test_each_run_gets_its_own_metrics_answer_and_its_name(
    client: TestClient, metrics_dir: Path
) -> None:
    write_run(metrics_dir, "a", loss_run(50), {"name": "lr 3e-6", "project": "math"})
    write_run(metrics_dir, "b", loss_run(30, value=lambda s: 2.0))
    sync(client, "a", "b")
    data = compare(client, "jobs=a,b&max_points=20&fields=loss")
    assert data["x"] == "step" and data["smoothing"] is None
    a, b = data["jobs"]
    assert (a["job_id"], a["name"], a["project"], a["status"], a["health"]) == (
        "a", "lr 3e-6", "math", "pending", "ok",
    )  # fmt: skip
    assert (b["job_id"], b["name"]) == ("b", None)
    for entry in (a, b):
        alone = client.get(
            f"/api/monitoring/{entry['job_id']}/metrics?max_points=20&fields=loss"
        ).json()
        assert {k: v for k, v in entry.items() if k in alone} == alone  # exactly /metrics' answer
        assert entry["x_values"] == entry["steps"]
    assert a["downsampled"] and a["bucket_steps"] == 3


def test_a_one_step_spike_in_one_run_stays_visible(client: TestClient, metrics_dir: Path) -> None:
    write_run(metrics_dir, "spiky", loss_run(6000, value=lambda s: 100.0 if s == 4321 else 1.0))
    write_run(metrics_dir, "calm", loss_run(6000, value=lambda s: 1.0))
    sync(client, "spiky", "calm")
    spiky, calm = compare(client, "jobs=spiky,calm&max_points=100&fields=loss.actor_loss")["jobs"]
    assert max(spiky["series"]["loss.actor_loss"]["max"]) == 100.0
    assert max(calm["series"]["loss.actor_loss"]["max"]) == 1.0


def test_x_time_is_seconds_since_the_run_started(client: TestClient, metrics_dir: Path) -> None:
    write_run(metrics_dir, "t", loss_run(10))
    sync(client, "t")
    (entry,) = compare(client, "jobs=t&x=time&start_step=4")["jobs"]
    assert entry["steps"][0] == 4 and entry["x_values"][:3] == [8.0, 10.0, 12.0]


def test_x_tokens_from_a_running_total_or_from_per_step_counts(
    client: TestClient, metrics_dir: Path
) -> None:
    write_run(metrics_dir, "trl", loss_run(10, num_tokens=lambda s: 100.0 * (s + 1)))
    write_run(metrics_dir, "verl", loss_run(10, **{"perf/total_num_tokens": lambda s: 10 + s}))
    write_run(metrics_dir, "none", loss_run(10))
    sync(client, "trl", "verl", "none")
    trl, verl, none = compare(client, "jobs=trl,verl,none&x=tokens&start_step=2")["jobs"]
    assert trl["x_values"][:3] == [300.0, 400.0, 500.0]
    # Running sums through each step, counted from the run's start (10 + 11 before step 2).
    assert verl["x_values"][:3] == [21 + 12, 21 + 12 + 13, 21 + 12 + 13 + 14]
    assert none["x_values"] == [None] * 8
    # Bucketed: a bucket's first step for a running total; spans at the mean for counts.
    write_run(metrics_dir, "long", loss_run(6000, **{"perf/total_num_tokens": lambda s: 5}))
    sync(client, "long")
    (long,) = compare(client, "jobs=long&x=tokens&max_points=100")["jobs"]
    assert long["downsampled"]
    assert long["x_values"] == [5.0 * (step + 1) for step in long["steps"]]


@pytest.mark.parametrize("weight", [0.6, 0.95])
def test_smoothing_is_the_ema_of_the_exact_values(
    client: TestClient, metrics_dir: Path, weight: float
) -> None:
    noisy = [math.sin(step) + step / 100 for step in range(400)]
    values = {step: v for step, v in enumerate(noisy)}
    values[7] = math.nan  # skipped, as a non-finite value
    records = loss_run(400, value=lambda s: values[s])
    for record in records:
        if record["step"] == 7:
            record["loss"]["actor_loss"] = "NaN"
    write_run(metrics_dir, "s", records)
    sync(client, "s")
    finite = [v for s, v in enumerate(noisy) if s != 7]
    reference = ema(finite, weight)
    by_step = {}
    for index, step in enumerate(s for s in range(400) if s != 7):
        by_step[step] = reference[index]
    by_step[7] = by_step[6]
    # Exact answer (every record is a point).
    (exact,) = compare(client, f"jobs=s&smoothing={weight}")["jobs"]
    assert exact["smoothing_exact"] is True and not exact["downsampled"]
    line = exact["series"]["loss.actor_loss"]["smoothed"]
    assert line == pytest.approx([by_step[s] for s in range(400)])
    # Downsampled, still from every record: a point holds the average after its last step.
    data = compare(client, f"jobs=s&smoothing={weight}&max_points=40")
    (bucketed,) = data["jobs"]
    assert data["smoothing"] == {"method": "ema", "weight": weight}
    assert bucketed["downsampled"] and bucketed["smoothing_exact"] is True
    line = bucketed["series"]["loss.actor_loss"]["smoothed"]
    assert line == pytest.approx([by_step[last] for last in bucketed["last_steps"]])


def test_window_mean_of_the_exact_values(client: TestClient, metrics_dir: Path) -> None:
    write_run(metrics_dir, "w", loss_run(100, value=lambda s: float(s)))
    sync(client, "w")
    (entry,) = compare(client, "jobs=w&window=10&max_points=20")["jobs"]
    expected = [
        sum(range(max(0, last - 9), last + 1)) / min(10, last + 1) for last in entry["last_steps"]
    ]
    assert entry["series"]["loss.actor_loss"]["smoothed"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("steps", "weight", "query"),
    [(1000, 0.9, ""), (2000, 0.99, "&start_step=1000")],
    ids=["whole-run", "range"],
)
def test_beyond_the_exact_limit_smoothing_runs_over_the_buckets(
    settings: Settings, metrics_dir: Path, steps: int, weight: float, query: str
) -> None:
    """Over the buckets too, a range's line starts from the run before it."""
    half = steps // 2
    write_run(metrics_dir, "big", loss_run(steps, value=lambda s: 3.0 if s < half else 1.0))
    limited = settings.model_copy(update={"compare_exact_smoothing_rows": 100})
    with TestClient(create_app(limited)) as client:
        sync(client, "big")
        (entry,) = compare(client, f"jobs=big&smoothing={weight}&max_points=50{query}")["jobs"]
        assert entry["smoothing_exact"] is False
        line = entry["series"]["loss.actor_loss"]["smoothed"]
        # Buckets of equal values: the method is exact there.
        reference = ema([3.0 if s < half else 1.0 for s in range(steps)], weight)
        assert line == pytest.approx([reference[last] for last in entry["last_steps"]])
        if query:
            # Started afresh at step 1000, the line would be 1.0 throughout.
            assert line[0] > 2.5  # 1 + 2 * 0.99**20 after the first bucket of 20 steps


@pytest.mark.parametrize("smoothing", ["smoothing=0.95", "window=25"])
def test_a_range_is_smoothed_as_the_whole_run_is(
    client: TestClient, metrics_dir: Path, smoothing: str
) -> None:
    """A zoomed chart asks for a range: its smoothed line must continue the whole
    run's, not start again at the range's first step."""
    write_run(metrics_dir, "z", loss_run(600, value=lambda s: math.sin(s / 7) + (s > 300)))
    sync(client, "z")
    (whole,) = compare(client, f"jobs=z&{smoothing}&max_points=1000")["jobs"]
    at_step = dict(zip(whole["steps"], whole["series"]["loss.actor_loss"]["smoothed"], strict=True))
    for query in ("start_step=301&end_step=420", "start_step=301&end_step=599&max_points=50"):
        (zoomed,) = compare(client, f"jobs=z&{smoothing}&{query}")["jobs"]
        assert zoomed["smoothing_exact"] is True and zoomed["start_step"] == 301
        ends = zoomed["last_steps"] if zoomed["downsampled"] else zoomed["steps"]
        line = zoomed["series"]["loss.actor_loss"]["smoothed"]
        assert line == pytest.approx([at_step[step] for step in ends])


def test_runs_with_disjoint_metrics_compare_without_error(
    client: TestClient, metrics_dir: Path
) -> None:
    write_run(metrics_dir, "l", loss_run(5))
    write_run(metrics_dir, "r", [{"step": s, "reward": {"mean": 0.1 * s}} for s in range(5)])
    sync(client, "l", "r")
    l_entry, r_entry = compare(client, "jobs=l,r&fields=loss.actor_loss,reward.mean&smoothing=0.5")[
        "jobs"
    ]
    assert list(l_entry["series"]) == ["loss.actor_loss"]
    assert list(r_entry["series"]) == ["reward.mean"]


def test_bad_comparisons_are_refused(client: TestClient, metrics_dir: Path) -> None:
    for job_id in ("a", "b"):
        write_run(metrics_dir, job_id, loss_run(3))
    answer = client.get("/api/compare?jobs=a,ghost")
    assert answer.status_code == 404 and "ghost" in answer.json()["detail"]
    answer = client.get("/api/compare?jobs=ghost,a,spook")
    assert answer.status_code == 404
    assert answer.json()["detail"] == "jobs not found: 'ghost', 'spook'"
    assert client.get("/api/compare/config?jobs=ghost").status_code == 404
    many = ",".join(f"j{i}" for i in range(21))
    for query in (
        f"jobs={many}",
        "jobs=",
        "jobs=,,",
        "jobs=a,a",
        "jobs=a,b%2Fc",
        "jobs=a&smoothing=0.5&window=3",
        "jobs=a&smoothing=1",
        "jobs=a&window=0",
        "jobs=a&x=epoch",
        "jobs=a&max_points=1",
        "jobs=a&start_step=5&end_step=2",
        "jobs=a&fields=loss.nope",
        "jobs=a&smoothin=0.5",
    ):
        assert client.get(f"/api/compare?{query}").status_code == 422, query
    assert client.get(f"/api/compare/config?jobs={many}").status_code == 422


def test_one_comparison_asks_for_at_most_the_servers_point_budget(
    client: TestClient, metrics_dir: Path
) -> None:
    """20 runs x 20,000 points with x=time and smoothing took 24-26 s and 22.5 MB
    (issue 23): the runs' points together are bounded, 422 beyond, saying how."""
    ids = [f"r{i}" for i in range(20)]
    for job_id in ids:
        write_run(metrics_dir, job_id, loss_run(3))
    sync(client, *ids)
    jobs = ",".join(ids)

    refused = client.get(f"/api/compare?jobs={jobs}&max_points=20000&x=time&smoothing=0.9")

    assert refused.status_code == 422
    message = refused.json()["detail"]
    assert (
        "20 runs x 20000 points is 400000" in message and "PLATFORM_COMPARE_MAX_POINTS" in message
    )
    assert client.get(f"/api/compare?jobs={jobs}&max_points=5000").status_code == 200
    assert client.get(f"/api/compare?jobs={jobs}&max_points=5001").status_code == 422
    assert client.get("/api/compare?jobs=r0,r1,r2,r3,r4&max_points=20000").status_code == 200


def test_the_point_budget_is_the_servers_setting(settings: Settings, metrics_dir: Path) -> None:
    write_run(metrics_dir, "a", loss_run(3))
    write_run(metrics_dir, "b", loss_run(3))
    tight = settings.model_copy(update={"compare_max_points": 100})
    with TestClient(create_app(tight)) as client:
        sync(client, "a", "b")
        assert client.get("/api/compare?jobs=a,b&max_points=50").status_code == 200
        assert client.get("/api/compare?jobs=a,b&max_points=51").status_code == 422


def test_config_differences(client: TestClient, metrics_dir: Path) -> None:
    shared = {"model": "qwen", "rollout": {"n": 8, "temperature": 1.0}, "stages": [1, 2]}
    write_run(metrics_dir, "x", loss_run(2), {"config": {**shared, "actor": {"lr": 3e-6}}})
    write_run(
        metrics_dir, "y", loss_run(2),
        {"config": {**shared, "actor": {"lr": 1e-6, "clip": 0.2}, "stages": [1, 3]}},
    )  # fmt: skip
    write_run(metrics_dir, "z", loss_run(2))  # no run file: an empty config
    sync(client, "x", "y", "z")
    answer = client.get("/api/compare/config?jobs=x,y")
    assert answer.json() == {
        "jobs": ["x", "y"],
        "differences": {
            "actor.clip": {"x": None, "y": 0.2},
            "actor.lr": {"x": 3e-6, "y": 1e-6},
            "stages": {"x": [1, 2], "y": [1, 3]},
        },
        "same": 3,
    }
    three = client.get("/api/compare/config?jobs=x,y,z").json()
    assert three["same"] == 0 and three["differences"]["model"] == {
        "x": "qwen",
        "y": "qwen",
        "z": None,
    }
