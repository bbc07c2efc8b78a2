"""`training_platform.client`: the same answers from a real server and from its database."""

from __future__ import annotations

import math
import socket
from typing import Any

import pandas as pd
import pytest

from tests.client.conftest import reward
from tests.web.conftest import LiveServer
from training_platform import errors
from training_platform.client import (
    Client,
    InvalidParameterError,
    MissingExtraError,
    RunNotFoundError,
    ServerUnavailableError,
    frames,
    local,
)
from training_platform.client import (
    client as client_module,
)
from training_platform.client.http import Http
from training_platform.history.export import files


def test_runs_are_listed_with_their_filters_and_a_run_has_its_metadata(
    server: LiveServer,
) -> None:
    client = Client(server.url)
    assert sorted(run.job_id for run in client.runs()) == ["fast", "slow"]
    assert [run.job_id for run in client.runs(tag="sweep")] == ["fast"]
    assert client.runs(status="completed") == []
    run = client.run("fast")
    assert run.tags == ["sweep"] and run.status == "pending" and run.config is None
    assert repr(run) == "Run('fast', status='pending', name=None)"


def test_history_is_every_step_at_full_fidelity(server: LiveServer) -> None:
    history = Client(server.url).run("fast").history()
    assert isinstance(history, pd.DataFrame)
    assert list(history["step"]) == list(range(300))
    assert list(history.columns) == [
        "step",
        "timestamp",
        "loss.actor_loss",
        "reward.mean",
        "extra.lr",
    ]
    assert math.isnan(history["loss.actor_loss"][3]) and history["loss.actor_loss"][4] == 0.2
    assert history["reward.mean"][250] == reward(250, 0.05)  # exactly, not a bucket mean
    picked = Client(server.url).run("fast").history(fields=["reward"], start_step=10, end_step=19)
    assert list(picked.columns) == ["step", "timestamp", "reward.mean"]
    assert list(picked["step"]) == list(range(10, 20))


def test_history_with_max_points_is_the_downsampled_answer(server: LiveServer) -> None:
    points = Client(server.url).run("fast").history(max_points=30)
    assert len(points) <= 30
    assert {"step", "reward.mean", "reward.mean:min", "reward.mean:max"} <= set(points.columns)
    assert points["reward.mean:max"].max() == pytest.approx(reward(299, 0.05))


def test_samples_and_anomalies(server: LiveServer) -> None:
    run = Client(server.url).run("fast")
    samples = run.samples(step=2)
    assert list(samples["index"]) == [0, 1, 2] and list(samples["reward"]) == [0.0, 0.5, 1.0]
    assert list(samples["extra.k"]) == [1, 1, 1]
    assert len(run.samples(step=5)) == 0
    anomalies = run.anomalies()
    assert "nan_inf" in set(anomalies["type"]) and 3 in set(anomalies["step"])


def test_without_pandas_and_pyarrow_the_answers_are_lists_of_dicts(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frames, "installed", lambda module: False)
    monkeypatch.setattr(client_module, "installed", lambda module: False)
    run = Client(server.url).run("fast")
    rows = run.history(end_step=4)
    assert isinstance(rows, list) and [row["step"] for row in rows] == [0, 1, 2, 3, 4]
    assert math.isnan(rows[3]["loss.actor_loss"]) and rows[0]["extra.lr"] == 0.05
    assert [row["reward"] for row in run.samples(step=2)] == [0.0, 0.5, 1.0]


def test_a_server_without_pyarrow_answers_the_client_through_jsonl(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> Any:
        raise errors.MissingExtraError("format 'parquet' needs pyarrow, which is not installed")

    monkeypatch.setattr(files, "require_pyarrow", missing)
    history = Client(server.url).run("slow").history(end_step=9)
    assert list(history["step"]) == list(range(10))
    assert history["reward.mean"][9] == reward(9, 0.01)


def test_errors_name_the_run_or_the_parameter(server: LiveServer) -> None:
    client = Client(server.url)
    with pytest.raises(RunNotFoundError, match="'nope'") as found:
        client.run("nope")
    assert found.value.status == 404 and found.value.code == "job_not_found"
    run = client.run("fast")
    with pytest.raises(InvalidParameterError, match=r"'extra\.nope'"):
        run.history(fields="extra.nope")
    with pytest.raises(InvalidParameterError, match="start_step"):
        run.history(start_step=9, end_step=2)
    with pytest.raises(InvalidParameterError, match="step, or start_step"):
        run.samples(step=1, start_step=0)


def test_an_unreachable_server_is_retried_with_backoff_then_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    waits: list[float] = []
    http = Http(f"http://127.0.0.1:{port}", retries=3, backoff=0.5, sleep=waits.append)
    with pytest.raises(ServerUnavailableError, match=f"127.0.0.1:{port}.*4 tries"):
        http.get_json("/api/jobs", what="the runs list")
    assert waits == [0.5, 1.0, 2.0]


def test_the_database_path_gives_the_same_answers(server: LiveServer) -> None:
    remote = Client(server.url)
    with Client(database_url=server.settings.database_url) as direct:
        assert [run.job_id for run in direct.runs()] == [run.job_id for run in remote.runs()]
        assert [run.job_id for run in direct.runs(tag="sweep")] == ["fast"]
        a, b = remote.run("fast"), direct.run("fast")
        assert (a.tags, a.status, a.config, a.name) == (b.tags, b.status, b.config, b.name)
        pd.testing.assert_frame_equal(a.history(), b.history())
        pd.testing.assert_frame_equal(a.samples(), b.samples())
        pd.testing.assert_frame_equal(a.history(max_points=50), b.history(max_points=50))
        with pytest.raises(RunNotFoundError, match="'nope'"):
            direct.run("nope")
        with pytest.raises(InvalidParameterError, match=r"'extra\.nope'"):
            b.history(fields=["extra.nope"])


def test_the_database_path_without_the_server_install_says_which(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local, "installed", lambda module: module != "sqlalchemy")
    with pytest.raises(MissingExtraError, match=r"training-platform\[server\]"):
        Client(database_url="sqlite:///nowhere.db")
    with pytest.raises(InvalidParameterError, match="either"):
        Client()


def test_importing_the_client_brings_nothing_of_the_server() -> None:
    """It installs with the trainer side: no FastAPI, SQLAlchemy, pandas or pyarrow at import."""
    import subprocess
    import sys

    heavy = ("fastapi", "sqlalchemy", "pydantic", "pandas", "pyarrow", "typer")
    code = (
        "import sys, training_platform.client as c; c.Client('http://127.0.0.1:9'); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_servers_codes_become_exceptions_naming_what_was_asked() -> None:
    from training_platform.client.errors import AuthenticationError, error_from_answer

    unauthorized = error_from_answer(
        401, {"detail": "missing or invalid API token", "code": "unauthorized"}, "the runs list"
    )
    assert isinstance(unauthorized, AuthenticationError) and "the runs list" in str(unauthorized)
    invalid = error_from_answer(
        422,
        {"detail": [{"loc": ["query", "format"], "msg": "bad"}], "code": "validation_error"},
        "the metrics of run 'a'",
    )
    assert isinstance(invalid, InvalidParameterError) and "format: bad" in str(invalid)
    missing = error_from_answer(501, {"detail": "x", "code": "extra_not_installed"}, "w")
    assert isinstance(missing, MissingExtraError) and missing.status == 501
    assert isinstance(error_from_answer(502, "<html>", "w"), ServerUnavailableError)
