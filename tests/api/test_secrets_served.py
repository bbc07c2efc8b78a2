"""A run file the callback did not mask (an older version, another tool, a hand) is
masked when it is stored: `GET /api/jobs`, `/api/jobs/{id}` and `/api/compare/config`
serve none of its secrets, on both databases. The shapes: tests/callbacks/wire/test_secrets.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.callbacks.wire.test_secrets import (
    COMMIT,
    GHP,
    HF,
    KEPT,
    MARK,
    SK,
    assert_no_secret,
    masked_argv,
    masked_config,
    secret_argv,
    secret_config,
)
from training_platform.callbacks.wire.secrets import MASK


def hand_written_run(metrics_dir: Path, job_id: str, **fields: Any) -> None:
    """A job whose run file was written by something other than PlatformCallback."""
    (metrics_dir / f"{job_id}_metrics.jsonl").write_bytes(b"")
    (metrics_dir / f"{job_id}_run.json").write_text(json.dumps({"job_id": job_id, **fields}))


def sync(client: TestClient, job_id: str) -> None:
    assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200


def get(client: TestClient, url: str) -> Any:
    answer = client.get(url)
    assert answer.status_code == 200, answer.text
    assert_no_secret(answer.text)
    return answer.json()


def test_a_hand_written_run_file_is_served_without_its_secrets(
    client: TestClient, metrics_dir: Path
) -> None:
    hand_written_run(
        metrics_dir, "leaky", project="p", name=f"lr 3e-6 {HF}", tags=["grpo", SK],
        config={**secret_config(), **KEPT}, command=secret_argv(),
        git={"commit": COMMIT, "dirty": True, "remote": f"https://x:{GHP}@github.com/o/r"},
        host="gpu-node-3", framework={"name": "trl", "version": "0.19"},
    )  # fmt: skip
    sync(client, "leaky")
    data = get(client, "/api/jobs/leaky")
    assert data["config"] == {**masked_config(), **KEPT}  # what the callback would write
    run = data["run"]
    assert run["command"] == masked_argv()
    assert run["git"] == {
        "commit": COMMIT, "dirty": True, "remote": f"https://x:{MASK}@github.com/o/r",
    }  # fmt: skip
    assert (data["name"], data["tags"]) == (f"lr 3e-6 {MASK}", ["grpo", MASK])
    assert (run["host"], run["file_error"]) == ("gpu-node-3", None)
    (listed,) = get(client, "/api/jobs")["jobs"]
    assert listed["config"] == data["config"]


def test_the_config_differences_show_masked_values_only(
    client: TestClient, metrics_dir: Path
) -> None:
    hand_written_run(metrics_dir, "a", config={**secret_config(), "lr": 3e-6})
    hand_written_run(metrics_dir, "b", config={"HF_TOKEN": f"other{MARK}", "lr": 1e-6})
    for job_id in ("a", "b"):
        sync(client, job_id)
    body = get(client, "/api/compare/config?jobs=a,b")
    differences = body["differences"]
    assert differences["lr"] == {"a": 3e-6, "b": 1e-6}
    assert differences["db_url"] == {"a": f"postgresql://u:{MASK}@db/x", "b": None}
    assert differences["secrets.db.pw"] == {"a": MASK, "b": None}
    assert "HF_TOKEN" not in differences  # two different tokens, both masked: the same


def test_a_command_given_as_one_text_is_masked(client: TestClient, metrics_dir: Path) -> None:
    text = f"python train.py --hub_token {MARK}x --db postgresql://u:{MARK}@h/d -p {MARK}"
    hand_written_run(metrics_dir, "text-cmd", command=text, config=f"--api-key={MARK}")
    sync(client, "text-cmd")
    data = get(client, "/api/jobs/text-cmd")
    assert data["run"]["command"] == (
        f"python train.py --hub_token {MASK} --db postgresql://u:{MASK}@h/d -p {MASK}"
    )
    assert data["config"] == {"value": f"--api-key={MASK}"}


def test_a_rewritten_run_file_is_masked_again(client: TestClient, metrics_dir: Path) -> None:
    hand_written_run(metrics_dir, "re", config={"lr": 1})
    sync(client, "re")
    path = metrics_dir / "re_run.json"
    path.write_text(json.dumps({"job_id": "re", "config": {"wandb": {"api_key": MARK}}}))
    sync(client, "re")
    assert get(client, "/api/jobs/re")["config"] == {"wandb": {"api_key": MASK}}
