"""The client takes flat metric names (docs/contract.md, "Metric names") on both paths."""

from __future__ import annotations

import pandas as pd

from tests.web.conftest import LiveServer
from training_platform.client import Client


def test_a_flat_name_is_the_column_name_through_the_api_and_the_database(
    server: LiveServer,
) -> None:
    remote = Client(server.url).run("fast")
    with Client(database_url=server.settings.database_url) as direct_client:
        direct = direct_client.run("fast")
        for run in (remote, direct):
            every = run.history(fields=["reward_mean"], end_step=9)
            assert list(every.columns) == ["step", "timestamp", "reward_mean"]
            ours = run.history(fields=["reward.mean"], end_step=9)
            assert list(every["reward_mean"]) == list(ours["reward.mean"])

            points = run.history(fields="reward_mean", max_points=50)
            assert {"reward_mean", "reward_mean:min", "reward_mean:max"} <= set(points.columns)
            assert not any(column.startswith("reward.") for column in points.columns)
        pd.testing.assert_frame_equal(
            remote.history(fields="reward_mean", max_points=50),
            direct.history(fields="reward_mean", max_points=50),
        )
