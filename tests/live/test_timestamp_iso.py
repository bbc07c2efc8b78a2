"""The `metric` messages keep `timestamp` (Unix seconds) and add `timestamp_iso` (UTC text)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from training_platform.history.iso_time import iso_utc
from training_platform.history.playback import metric_text
from training_platform.live.channels import metric_message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1_767_268_800.5, "2026-01-01T12:00:00.500Z"),
        (1_704_672_000.123, "2024-01-08T00:00:00.123Z"),  # 0.12299999... as a double
        (-0.5, "1969-12-31T23:59:59.500Z"),
        (None, None),
        (1e20, None),  # no calendar holds it: no text rather than an error
    ],
)
def test_iso_utc_is_utc_with_milliseconds_and_z(seconds: float | None, text: str | None) -> None:
    assert iso_utc(seconds) == text


def test_the_iso_text_reads_back_as_the_same_instant() -> None:
    text = iso_utc(1_767_268_800.25)
    assert text is not None
    assert datetime.fromisoformat(text).timestamp() == 1_767_268_800.25


def test_the_live_message_carries_both_forms() -> None:
    record = {"step": 4, "timestamp": 1_767_268_800.5, "loss": {"actor_loss": 0.4}}
    message = json.loads(metric_message(1, record, max_bytes=4096).text)
    assert message["data"] == {**record, "timestamp_iso": "2026-01-01T12:00:00.500Z"}
    assert "timestamp_iso" not in record  # the announced record is shared: never changed


def test_the_playback_message_carries_both_forms_truncated_too() -> None:
    record = {"step": 4, "timestamp": 1_767_268_800.5, "extra": {"x": "y" * 2000}}
    whole = json.loads(metric_text(record, index=0, total=1, max_bytes=4096))
    assert whole["data"]["timestamp_iso"] == "2026-01-01T12:00:00.500Z"
    cut = json.loads(metric_text(record, index=0, total=1, max_bytes=1024))
    assert cut["truncated"] is True
    assert cut["data"] == {
        "step": 4,
        "timestamp": 1_767_268_800.5,
        "timestamp_iso": "2026-01-01T12:00:00.500Z",
    }
