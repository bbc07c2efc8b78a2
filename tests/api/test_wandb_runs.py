"""W&B offline runs as jobs (`"format": "wandb"`, DESIGN.md §7): transaction logs
written by the W&B SDK itself (`WANDB_MODE=offline`, in a child process) read
incrementally by byte offset, exactly once, with the trainers' key mapping, the
run's config (secrets masked), name and project; the LevelDB-log framing's
half-written records held back and bad checksums counted; a `wandb/` directory
under the metrics directory discovered; SSH; new rows streamed live.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.api.live_support import live_server, live_settings, metric_steps, open_ws, receive_until
from tests.fixtures_sshd import SSHD
from tests.ingest.test_verl_file import stored, sync
from training_platform.ingest.formats.wandb_log import read_framed
from training_platform.settings import Settings

pytest.importorskip("wandb")

SECRET = "sk-abcdefghijklmnopqrstuvwx"


def wandb_child(
    directory: Path, steps: range, *, pause: float = 0.0, gate: bool = False
) -> subprocess.Popen[str]:
    """The W&B SDK logging an offline run under `directory`/wandb; prints its run dir
    (and with `gate`, waits for a line on its stdin before logging)."""
    script = textwrap.dedent(f"""
        import sys, time, wandb
        run = wandb.init(project="rl", name="grpo-a",
                         config={{"lr": 1e-05, "api_key": {SECRET!r}, "model": "qwen"}})
        print(run.dir.rsplit("/files", 1)[0], flush=True)
        if {gate!r}:
            sys.stdin.readline()
        for step in {list(steps)!r}:
            run.log({{"train/loss": 1.0 / (step + 1), "actor/pg_loss": 0.5,
                      "critic/score/mean": 0.1 * step, "eval": {{"acc": 0.5}}}}, step=step)
            time.sleep({pause})
        run.finish()
    """)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(directory),
           "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True, cwd=directory,
                            stdin=subprocess.PIPE if gate else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def logged(directory: Path, steps: range) -> Path:
    child = wandb_child(directory, steps)
    out, errors = child.communicate(timeout=180)
    assert child.returncode == 0, errors
    return Path(out.split()[0])


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 40-step offline run, written once by the W&B SDK (it takes seconds to start):
    each test copies its run directory."""
    return logged(tmp_path_factory.mktemp("wandb"), range(40))


def copy_run(written: Path, where: Path) -> Path:
    target = where / "wandb" / written.name
    shutil.copytree(written, target)
    return target


def register(client: TestClient, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/api/jobs", json={"job_id": job_id, "format": "wandb", **body})
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


def check_run(client: TestClient, job_id: str, steps: int = 40) -> None:
    records = stored(client, job_id)
    assert [record["step"] for record in records] == list(range(steps))
    assert records[2]["loss"]["total_loss"] == pytest.approx(1 / 3)
    assert records[2]["reward"]["mean"] == pytest.approx(0.2)
    assert records[2]["extra"]["eval.acc"] == 0.5  # a nested key, joined
    assert "_runtime" not in json.dumps(records[2])
    job = client.get(f"/api/jobs/{job_id}").json()
    assert (job["name"], job["project"], job["format"]) == ("grpo-a", "rl", "wandb")
    assert job["config"]["lr"] == pytest.approx(1e-5) and job["config"]["model"] == "qwen"
    assert SECRET not in json.dumps(job["config"])
    assert job["status"] == "completed"  # its exit record: `run.finish()` with exit code 0


def test_an_offline_run_is_read_exactly_once(
    client: TestClient, tmp_path: Path, written: Path
) -> None:
    run_dir = copy_run(written, tmp_path)
    register(client, "wb-a", {"metrics_dir": str(run_dir)})
    sync(client, "wb-a")
    check_run(client, "wb-a")
    assert sync(client, "wb-a")["new_metrics"] == 0  # nothing read twice


def test_a_half_written_record_is_held_back_and_a_bad_checksum_counted(written: Path) -> None:
    (path,) = written.glob("run-*.wandb")
    data = path.read_bytes()

    def read_at(offset: int, size: int, view: bytes = data) -> bytes:
        return view[offset : offset + size]

    whole = read_framed(read_at, len(data), 0, 1 << 20)
    assert whole.corrupt == [] and whole.offset == len(data) and whole.at_eof
    # Every cut: only whole records, and reading on from there gives the rest once.
    for cut in range(8, len(data), 97):
        first = read_framed(read_at, cut, 0, 1 << 20)
        rest = read_framed(read_at, len(data), first.offset, 1 << 20)
        assert first.records + rest.records == whole.records
    # Small reads see each record once too.
    offset, records = 0, []
    while True:
        batch = read_framed(read_at, len(data), offset, 64)
        records += batch.records
        offset = batch.offset
        if batch.at_eof:
            break
    assert records == whole.records
    broken = bytearray(data)
    broken[whole.offset - 3] ^= 0xFF  # inside the last record
    bad = read_framed(lambda o, n: bytes(broken[o : o + n]), len(broken), 0, 1 << 20)
    assert len(bad.corrupt) == 1 and bad.records == whole.records[:-1]


def test_a_wandb_directory_under_the_metrics_directory_is_discovered(
    client: TestClient, metrics_dir: Path, written: Path
) -> None:
    run_dir = copy_run(written, metrics_dir / "exp")
    jobs = {job["job_id"]: job for job in client.get("/api/jobs").json()["jobs"]}
    (job_id,) = jobs
    assert job_id == f"exp.wandb.{run_dir.name}" and jobs[job_id]["format"] == "wandb"
    sync(client, job_id)
    assert [record["step"] for record in stored(client, job_id)] == list(range(40))


def test_an_offline_run_on_an_ssh_host(ssh_client: TestClient, sshd: SSHD, written: Path) -> None:
    run_dir = copy_run(written, sshd.remote_dir)
    register(ssh_client, "wb-remote", sshd.job_body("wb-remote", remote_dir=str(run_dir)))
    sync(ssh_client, "wb-remote")
    check_run(ssh_client, "wb-remote")


def test_rows_logged_while_the_server_runs_stream_live(settings: Settings, tmp_path: Path) -> None:
    with live_server(live_settings(settings)) as server:
        child = wandb_child(tmp_path, range(4), pause=0.5, gate=True)
        try:
            assert child.stdout is not None and child.stdin is not None
            run_dir = child.stdout.readline().strip()
            body = {"job_id": "wb-live", "format": "wandb", "metrics_dir": run_dir}
            answer = httpx.post(server.http_url("/api/jobs"), json=body, timeout=30)
            assert answer.status_code == 201, answer.text
            with open_ws(server.ws_url("/api/monitoring/wb-live/live")) as ws:
                receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
                child.stdin.write("go\n")
                child.stdin.flush()
                messages = receive_until(ws, lambda got: 3 in metric_steps(got), timeout=60)
        finally:
            child.communicate(timeout=120)
        steps = metric_steps(messages)
        assert sorted(set(steps)) == [0, 1, 2, 3]


def frame_log(payloads: list[bytes]) -> bytes:
    """A W&B transaction log of `payloads`, framed as LevelDB's log format says
    (what the SDK's writer does), for records no SDK call writes as large."""
    import struct
    import zlib

    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for payload in payloads:
        rest, first = payload, True
        while True:
            left = 32768 - len(out) % 32768
            if left < 7:
                out += b"\0" * left
                continue
            piece, rest = rest[: left - 7], rest[left - 7 :]
            kind = (1 if first else 4) if not rest else (2 if first else 3)
            crc = zlib.crc32(piece, zlib.crc32(bytes((kind,))))
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if not rest:
                break
    return bytes(out)


def test_a_record_longer_than_a_read_is_read_whole() -> None:
    payloads = [b"a" * 10, bytes(range(256)) * 400, b"b" * 5]  # the middle one: ~100 KB
    data = frame_log(payloads)
    offset, records = 0, []
    for _ in range(10):
        batch = read_framed(lambda o, n: data[o : o + n], len(data), offset, 1)
        records += batch.records
        offset = batch.offset
        if batch.at_eof:
            break
    assert records == payloads and offset == len(data)


def test_a_run_whose_exit_record_has_an_error_code_is_failed(
    client: TestClient, tmp_path: Path
) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    items = [
        pb.HistoryItem(key="_step", value_json="0"),
        pb.HistoryItem(key="train/loss", value_json="1.5"),
    ]
    records = [
        pb.Record(history=pb.HistoryRecord(item=items)),
        pb.Record(exit=pb.RunExitRecord(exit_code=1, runtime=3)),
    ]
    run_dir = tmp_path / "offline-run-20260101_000000-failed"
    run_dir.mkdir()
    log = frame_log([record.SerializeToString() for record in records])
    exit_chunk = 7 + len(records[1].SerializeToString())
    (run_dir / "run-failed.wandb").write_bytes(log[:-exit_chunk])  # the exit not yet there
    register(client, "wb-failed", {"metrics_dir": str(run_dir)})
    sync(client, "wb-failed")
    assert client.get("/api/jobs/wb-failed").json()["status"] == "running"
    (run_dir / "run-failed.wandb").write_bytes(log)
    sync(client, "wb-failed")
    assert client.get("/api/jobs/wb-failed").json()["status"] == "failed"
