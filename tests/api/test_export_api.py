"""`GET .../metrics/export`, `.../samples/export`, `.../metrics/anomalies/export`."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from tests.web.conftest import serve_in_thread
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.history.export import files
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory
from training_platform.store.metric_rows import ROW_KEYS
from training_platform.store.models import Job, TrainingMetric

EXPORT = "/api/monitoring/run1/metrics/export"


def write_run(metrics_dir: Path, steps: int = 6) -> None:
    """Steps with NaN/inf, a text series, and `extra.late` from step 4 on; two samples."""
    with (metrics_dir / "run1_metrics.jsonl").open("wb") as handle:
        for step in range(steps):
            extra: dict[str, Any] = {"phase": "warm" if step < 2 else "hot"}
            if step >= 4:
                extra["late"] = float(step)
            loss = [math.nan, math.inf, -math.inf][step] if step < 3 else 1.0 / step
            record = build_record(
                step, {"loss": {"actor_loss": loss}, "extra": extra}, timestamp=5.0
            )
            handle.write(encode_record(record))
    with (metrics_dir / "run1_samples.jsonl").open("wb") as handle:
        for index, reward in enumerate([0.5, math.nan]):
            sample = build_sample(1, index, "2+2?", "4", reward=reward, rewards={"acc": 1.0})
            handle.write(encode_record(sample))


@pytest.fixture
def run1(client: TestClient, metrics_dir: Path) -> str:
    write_run(metrics_dir)
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    return "run1"


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [("csv", "text/csv"), ("parquet", "application/vnd.apache.parquet"),
     ("jsonl", "application/x-ndjson")],
)  # fmt: skip
def test_each_format_is_a_named_attachment_of_its_type(
    client: TestClient, run1: str, fmt: str, media_type: str
) -> None:
    answer = client.get(EXPORT, params={"format": fmt})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith(media_type)
    assert answer.headers["content-disposition"] == f'attachment; filename="run1.{fmt}"'


def test_csv_and_parquet_hold_every_step_with_its_nonfinite_values_and_late_columns(
    client: TestClient, run1: str
) -> None:
    rows = list(csv.DictReader(io.StringIO(client.get(EXPORT).text)))
    assert [row["step"] for row in rows] == ["0", "1", "2", "3", "4", "5"]
    assert [row["loss.actor_loss"] for row in rows[:3]] == ["NaN", "inf", "-inf"]
    assert [row["extra.late"] for row in rows] == ["", "", "", "", "4.0", "5.0"]
    table = pq.read_table(io.BytesIO(client.get(EXPORT, params={"format": "parquet"}).content))
    values = table.column("loss.actor_loss").to_pylist()
    assert math.isnan(values[0]) and values[1:3] == [math.inf, -math.inf]
    assert values[3] == pytest.approx(1 / 3)
    assert table.column("extra.phase").to_pylist()[:3] == ["warm", "warm", "hot"]
    assert str(table.schema.field("extra.late").type) == "double"


def test_jsonl_is_the_history_endpoints_records_one_a_line(client: TestClient, run1: str) -> None:
    lines = client.get(EXPORT, params={"format": "jsonl"}).text.splitlines()
    page = client.get("/api/monitoring/run1/metrics").json()["metrics"]
    assert [json.loads(line) for line in lines] == page


def test_samples_and_anomalies_export(client: TestClient, run1: str) -> None:
    samples = client.get("/api/monitoring/run1/samples/export", params={"format": "csv"})
    assert samples.headers["content-disposition"] == 'attachment; filename="run1_samples.csv"'
    rows = list(csv.DictReader(io.StringIO(samples.text)))
    assert [(row["step"], row["index"], row["reward"]) for row in rows] == [
        ("1", "0", "0.5"), ("1", "1", "NaN"),
    ]  # fmt: skip
    assert rows[0]["rewards.acc"] == "1.0" and rows[0]["completion"] == "4"
    anomalies = client.get(
        "/api/monitoring/run1/metrics/anomalies/export", params={"format": "jsonl"}
    ).text.splitlines()
    assert anomalies and {json.loads(line)["type"] for line in anomalies} >= {"nan_inf"}


def test_errors_name_the_job_the_field_or_the_format(client: TestClient, run1: str) -> None:
    missing = client.get("/api/monitoring/nope/metrics/export")
    assert missing.status_code == 404 and "'nope'" in missing.json()["detail"]
    unknown = client.get(EXPORT, params={"fields": "extra.phase,extra.nope"})
    assert unknown.status_code == 422 and unknown.json()["code"] == "invalid_parameter"
    assert "'extra.nope'" in unknown.json()["detail"]
    typo = client.get(EXPORT, params={"fields": "loss.actor_los"})
    assert typo.status_code == 422 and "'loss.actor_los'" in typo.json()["detail"]
    bad = client.get(EXPORT, params={"format": "xlsx"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "format"]
    assert client.get(EXPORT, params={"fromat": "csv"}).status_code == 422
    backwards = client.get(EXPORT, params={"start_step": 5, "end_step": 2})
    assert backwards.status_code == 422


def test_parquet_without_pyarrow_is_501_naming_the_extra(
    client: TestClient, run1: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    answer = client.get(EXPORT, params={"format": "parquet"})
    assert answer.status_code == 501
    assert answer.json()["code"] == "extra_not_installed"
    assert "training-platform[export]" in answer.json()["detail"]
    assert client.get(EXPORT, params={"format": "csv"}).status_code == 200


def _bulk(database_url: str, steps: int) -> None:
    engine = make_engine(database_url)
    with make_session_factory(engine)() as session:
        session.add(Job(job_id="run1", created_at=0.0, discovered=False, status="running"))
        session.flush()
        pad = "x" * 2_000  # fat rows: the socket's buffers hold only a few chunks
        rows = [
            {**dict.fromkeys(ROW_KEYS), "job_id": "run1", "step": step, "has_anomaly": False,
             "extra": {"pad": pad}, "received_at": 1.0}
            for step in range(steps)
        ]  # fmt: skip
        session.execute(insert(TrainingMetric.__table__), rows)
        session.commit()
    engine.dispose()


def test_a_client_that_disconnects_mid_export_stops_the_reading(
    settings: Settings, metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real server: the client reads the first bytes and hangs up; the server reads
    no further chunk (the generator is closed) long before the export's end."""
    total_chunks = 200
    _bulk(settings.database_url, total_chunks * 50)
    read = {"chunks": 0}
    closed = threading.Event()
    real = files.read_chunks

    def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
        kwargs["chunk_rows"] = 50
        try:
            for chunk in real(*args, **kwargs):
                read["chunks"] += 1
                time.sleep(0.005)
                yield chunk
        finally:
            closed.set()

    monkeypatch.setattr(files, "read_chunks", counted)
    with (
        serve_in_thread(settings, metrics_dir) as server,
        httpx.stream("GET", f"{server.url}{EXPORT}?format=csv", timeout=10) as answer,
    ):
        assert answer.status_code == 200
        next(answer.iter_bytes())
        assert read["chunks"] < total_chunks / 2
    assert closed.wait(10), "the export went on after the client left"
    assert read["chunks"] < total_chunks / 2
