"""Samples on the live stream: `samples` messages as steps land, findings from them as anomalies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.api.live_support import (
    append_steps,
    live_server,
    live_settings,
    open_ws,
    receive,
    receive_until,
)
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.settings import Settings

LIVE = "/api/monitoring/run1/live"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


def healthy_step(step: int, groups: int = 4, size: int = 4) -> list[dict[str, Any]]:
    """Varied completions of varied lengths, rewards that differ within each group."""
    samples = []
    for g in range(groups):
        for m in range(size):
            index = g * size + m
            words = [WORDS[(step * 7 + index * 3 + k) % len(WORDS)] for k in range(5 + index % 7)]
            samples.append(
                build_sample(
                    step, index, f"prompt {step}-{g}: explain {WORDS[g]}", " ".join(words),
                    reward=(m + g) / 10, group=f"p-{step}-{g}", response_length=len(words),
                    finish_reason="stop",
                )
            )  # fmt: skip
    return samples


def truncated_step(step: int) -> list[dict[str, Any]]:
    """Every completion cut by the length limit: the truncation detector's case."""
    return [
        {**sample, "finish_reason": "length", "response_length": 256}
        for sample in healthy_step(step)
    ]


def append_samples(path: Path, samples: list[dict[str, Any]]) -> None:
    with path.open("ab") as handle:
        handle.write(b"".join(encode_record(sample) for sample in samples))


def test_landed_samples_are_announced_per_step_and_findings_come_as_anomalies(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    samples = metrics_dir / "run1_samples.jsonl"
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"
        append_steps(run1, range(3))
        append_samples(samples, healthy_step(0) + healthy_step(1))
        messages = receive_until(
            ws, lambda ms: any(m["type"] == "samples" and m["step"] == 1 for m in ms)
        )
        append_samples(samples, truncated_step(2))
        messages += receive_until(ws, lambda ms: any(m["type"] == "anomaly" for m in ms))
        stored = httpx.get(
            server.http_url("/api/monitoring/run1/metrics/anomalies?source=samples"), timeout=10
        ).json()["anomalies"]
        job = httpx.get(server.http_url("/api/jobs/run1"), timeout=10).json()

    announced = [(m["step"], m["count"]) for m in messages if m["type"] == "samples"]
    assert announced == [(0, 16), (1, 16), (2, 16)]
    (anomaly,) = [m["data"] for m in messages if m["type"] == "anomaly"]
    assert (anomaly["step"], anomaly["type"], anomaly["sources"]) == (2, "truncation", ["samples"])
    assert sorted(anomaly["evidence"]) == list(range(16))  # every sample of the step was cut
    assert "16 of 16" in anomaly["message"]
    assert [(a["step"], a["type"], a["source"]) for a in stored] == [(2, "truncation", "samples")]
    assert sorted(stored[0]["evidence"]) == list(range(16))
    assert job["health"] == "critical" and job["anomaly_count"] == 1  # all cut: critical


def test_healthy_samples_raise_no_anomaly(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    samples = metrics_dir / "run1_samples.jsonl"
    with live_server(live_settings(settings)) as server, open_ws(server.ws_url(LIVE)) as ws:
        assert receive(ws)["type"] == "status"
        for step in range(12):
            append_steps(run1, [step])
            append_samples(samples, healthy_step(step))
        messages = receive_until(
            ws, lambda ms: any(m["type"] == "samples" and m["step"] == 11 for m in ms)
        )
        stored = httpx.get(
            server.http_url("/api/monitoring/run1/metrics/anomalies"), timeout=10
        ).json()["anomalies"]

    assert [m for m in messages if m["type"] == "anomaly"] == []
    assert stored == []
