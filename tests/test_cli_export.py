"""`training-platform export`: a run from the database into a file, no server."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.test_cli import assert_one_line_error, run
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.wire.samples import build_sample


@pytest.fixture
def stored(database_url: str, metrics_dir: Path) -> str:
    """`run1`: 5 steps (a NaN at step 1, `extra.late` from step 3), one sample; synced."""
    with (metrics_dir / "run1_metrics.jsonl").open("wb") as handle:
        for step in range(5):
            extra = {"late": 7.0} if step >= 3 else {}
            loss = math.nan if step == 1 else float(step)
            groups = {"loss": {"actor_loss": loss}, "extra": extra}
            handle.write(encode_record(build_record(step, groups, timestamp=1.0)))
    sample = build_sample(2, 0, "p", "c", reward=1.0)
    (metrics_dir / "run1_samples.jsonl").write_bytes(encode_record(sample))
    code, _, stderr = run("sync", "--metrics-dir", str(metrics_dir), "--database-url", database_url)
    assert code == 0, stderr
    return database_url


def test_parquet_by_default_into_the_named_file(stored: str, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    code, _, stderr = run("export", "run1", "-o", str(out), "--database-url", stored)
    assert code == 0, stderr
    assert "5 rows" in stderr and str(out) in stderr
    table = pq.read_table(out)
    assert table.column("step").to_pylist() == [0, 1, 2, 3, 4]
    assert math.isnan(table.column("loss.actor_loss").to_pylist()[1])
    assert table.column("extra.late").to_pylist() == [None, None, None, 7.0, 7.0]
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_csv_of_some_fields_and_the_samples_with_default_names(
    stored: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run(
        "export", "run1", "--format", "csv", "--fields", "extra", "--database-url", stored
    )
    assert code == 0, stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run1.csv").read_text())))
    assert list(rows[0]) == ["step", "timestamp", "extra.late"]
    assert [row["extra.late"] for row in rows] == ["", "", "", "7.0", "7.0"]
    code, _, stderr = run(
        "export", "run1", "--samples", "-f", "jsonl", "-q", "--database-url", stored
    )
    assert code == 0, stderr
    line = json.loads((tmp_path / "run1_samples.jsonl").read_text())
    assert (line["step"], line["prompt"], line["reward"]) == (2, "p", 1.0)


def test_errors_are_one_line(stored: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, _, stderr = run("export", "nosuch", "--database-url", stored)
    assert_one_line_error(code, stderr, "job 'nosuch' not found")
    code, _, stderr = run("export", "run1", "--fields", "extra.nope", "--database-url", stored)
    assert_one_line_error(code, stderr, "'extra.nope'")
    code, _, stderr = run("export", "run1", "--format", "xlsx", "--database-url", stored)
    assert_one_line_error(code, stderr, "--format", "xlsx")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, _, stderr = run("export", "run1", "--database-url", stored)
    assert_one_line_error(code, stderr, "pip install 'training-platform[export]'")
    assert list(here.iterdir()) == []  # no file, not even a partial one
