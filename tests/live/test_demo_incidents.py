"""The demo's injected fault, end to end: one fault reads as a handful of incidents.

`demo-train --steps 1500 --lr-spike-at 400` blows the policy up at step 400
and it never recovers (KL 2-3 against 0.3 before, entropy 0.1-0.6 against
2.7, the completions collapsed onto one phrase). Each condition that
follows is one incident that lasts, not a new alert whenever a rolling
baseline forgets the fault: the issue's budget is at most 2 incidents of
any one type and 12 in all (69 before incidents had spans), with the first
detection no later than step 401. A healthy run of the same length raises
none. Both go through the REST API, as the dashboard reads them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from training_platform.demo import DemoConfig, run_demo

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def listed(client: TestClient, job_id: str, raw: bool = False) -> list[dict[str, Any]]:
    assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200
    answer = client.get(
        f"/api/monitoring/{job_id}/metrics/anomalies",
        params={"limit": 10_000, "raw": str(raw).lower()},
    )
    assert answer.status_code == 200
    assert answer.json()["next_start_step"] is None
    anomalies: list[dict[str, Any]] = answer.json()["anomalies"]
    return anomalies


def test_the_demos_blow_up_is_a_handful_of_lasting_incidents(
    client: TestClient, metrics_dir: Path
) -> None:
    run_demo("spiky", metrics_dir, DemoConfig(steps=1500, lr_spike_at=400))

    incidents = listed(client, "spiky")

    per_type = Counter(incident["type"] for incident in incidents)
    assert len(incidents) <= 12, per_type
    assert max(per_type.values()) <= 2, per_type
    assert min(incident["step"] for incident in incidents) == 401  # caught at once, as before
    assert all(incident["step"] >= 400 for incident in incidents)  # nothing before the fault
    kl = next(incident for incident in incidents if incident["type"] == "kl_explosion")
    assert (kl["step"], kl["severity"]) == (401, "critical")
    assert kl["end_step"] >= 1490  # the KL never comes back down: one span to the end
    assert kl["ongoing"] is False  # the run has completed
    # What the blow-up sets off in the next steps is one episode with it.
    first_episode = [incident for incident in incidents if incident["episode"] == 401]
    assert {incident["type"] for incident in first_episode} >= {
        "kl_explosion",
        "entropy_collapse",
    }
    assert len(first_episode) >= 3
    # The raw findings stay available, one row per source.
    assert len(listed(client, "spiky", raw=True)) >= len(incidents)


def test_a_healthy_demo_run_of_the_same_length_raises_no_incident(
    client: TestClient, metrics_dir: Path
) -> None:
    run_demo("healthy", metrics_dir, DemoConfig(steps=1500))

    assert listed(client, "healthy") == []
