"""Fan-out pieces without a server: subscriptions, the hand-over rule, message shapes, pacing."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace
from typing import Any

import pytest

from training_platform.callbacks.wire.lines import decode_line, encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.errors import InvalidParameterError
from training_platform.history.playback import Pacer, PlaybackRange, parse_control
from training_platform.live.channels import (
    Dropped,
    HandOver,
    JobChannel,
    Message,
    metric_message,
    status_messages,
)
from training_platform.store.metric_rows import (
    ROW_KEYS,
    record_nonfinite_as_strings,
    record_to_row,
    row_to_record,
)


def metric(seq: int, step: int) -> Message:
    return Message(seq, "metric", step, f'{{"step": {step}}}')


async def drain(subscription: Any, count: int) -> list[Any]:
    return [await asyncio.wait_for(subscription.get(), 1) for _ in range(count)]


def test_every_subscriber_gets_every_batch_in_order() -> None:
    async def scenario() -> list[list[Any]]:
        channel = JobChannel("run1", queue_size=10)
        subscribers = [channel.subscribe() for _ in range(3)]
        channel.publish([metric(1, 0), metric(1, 1)])
        channel.publish([metric(2, 2)])
        return [await drain(s, 3) for s in subscribers]

    for received in asyncio.run(scenario()):
        assert [m.step for m in received] == [0, 1, 2]


def test_a_subscriber_with_a_backlog_is_dropped_alone_and_told_why() -> None:
    async def scenario() -> tuple[list[Any], list[Any], int]:
        channel = JobChannel("run1", queue_size=3)
        slow, fast = channel.subscribe(), channel.subscribe()
        channel.publish([metric(1, s) for s in range(5)])  # one burst over the limit: kept
        fast_got = await drain(fast, 5)
        channel.publish([metric(2, 5)])  # slow still has 5 pending: dropped now
        fast_got += await drain(fast, 1)
        return fast_got, await drain(slow, 1), channel.subscriber_count

    fast_got, slow_got, remaining = asyncio.run(scenario())
    assert [m.step for m in fast_got] == list(range(6))
    (dropped,) = slow_got
    assert isinstance(dropped, Dropped) and "too slow" in dropped.reason
    assert remaining == 1


def test_hand_over_skips_what_a_page_held_and_keeps_later_commits() -> None:
    handover = HandOver(status_seq=4)
    handover.add_page(19, seq=5)  # steps ..19 as of commit 5
    handover.add_page(math.inf, seq=7)  # steps 20.. as of commit 7

    assert handover.already_sent(metric(5, 10))  # in page 1
    assert not handover.already_sent(metric(6, 10))  # a rewrite after page 1: a new version
    assert handover.already_sent(metric(6, 25))  # committed before page 2 was read
    assert not handover.already_sent(metric(8, 25))
    assert handover.already_sent(metric(3, 2))  # before since_step, already in the past
    assert handover.already_sent(Message(4, "status", None, "{}"))
    assert not handover.already_sent(Message(5, "status", None, "{}"))
    assert not handover.already_sent(Message(1, "anomaly", 3, "{}"))  # never backfilled


def test_without_history_nothing_counts_as_sent() -> None:
    assert not HandOver(status_seq=0).already_sent(metric(1, 0))


def test_announced_records_match_the_stored_ones_in_api_form() -> None:
    line = (
        b'{"step": 3, "timestamp": 1.5, "loss": {"actor_loss": NaN, "total_loss": 2.0},'
        b' "kl": {"mean": -Infinity}, "extra": {"x": Infinity, "y": 1.0},'
        b' "reward": {"mean": 0.5, "median": NaN}}'
    )
    record = decode_line(line)
    row = SimpleNamespace(**record_to_row("run1", record, received_at=0.0))
    assert set(vars(row)) == set(ROW_KEYS)

    converted = record_nonfinite_as_strings(record)

    assert converted == row_to_record(row, nonfinite_as_strings=True)
    assert converted["loss"] == {"actor_loss": "NaN", "total_loss": 2.0}
    assert converted["other"] == {"reward": {"median": "NaN"}}
    assert math.isnan(record["loss"]["actor_loss"])  # the input is left alone
    plain = decode_line(encode_record(build_record(1, {"loss": 1.0}, timestamp=1.0)))
    assert record_nonfinite_as_strings(plain) is plain  # nothing to convert, no copy


def test_metric_messages_are_standard_json_and_capped() -> None:
    record = record_nonfinite_as_strings(decode_line(b'{"step": 1, "loss": {"actor_loss": NaN}}'))
    message = metric_message(7, record, max_bytes=1024)
    # No timestamp (verl's file logger writes none): no ISO form either.
    assert json.loads(message.text) == {"type": "metric", "data": {**record, "timestamp_iso": None}}
    assert (message.seq, message.kind, message.step) == (7, "metric", 1)

    big = {"step": 2, "timestamp": 3.0, "extra": {f"k{i}": float(i) for i in range(100)}}
    capped = json.loads(metric_message(8, big, max_bytes=1024).text)
    stub = {"step": 2, "timestamp": 3.0, "timestamp_iso": "1970-01-01T00:00:03.000Z"}
    assert capped == {"type": "metric", "data": stub, "truncated": True}


def test_a_terminal_status_is_followed_by_finished() -> None:
    running = status_messages(3, {"status": "running"})
    done = status_messages(4, {"status": "completed"})
    assert [m.kind for m in running] == ["status"]
    assert [m.kind for m in done] == ["status", "finished"]
    assert json.loads(done[1].text) == {"type": "finished", "status": "completed"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pacer_deadlines_are_absolute_and_follow_speed_changes() -> None:
    clock = FakeClock()
    pacer = Pacer(interval=0.5, speed=2.0, clock=clock)
    pacer.start(0)
    assert [pacer.due(i) for i in range(3)] == [100.0, 100.25, 100.5]

    clock.now = 100.6  # record 2 was sent late, at 100.6: the schedule does not slip
    assert pacer.due(3) == 100.75

    pacer.change_speed(0.5, next_index=3, last_sent_at=100.6)  # slower: 1 s apart
    assert pacer.due(3) == pytest.approx(101.6)
    assert pacer.due(4) == pytest.approx(102.6)

    clock.now = 200.0
    pacer.start(10)  # resume or seek: due now
    assert pacer.due(10) == 200.0 and pacer.due(11) == 201.0


SPAN = PlaybackRange(job_id="run1", start_step=10, end_step=20, total=11)


@pytest.mark.parametrize(
    ("text", "action", "value", "step"),
    [
        ('{"action": "pause"}', "pause", None, None),
        ('{"action": "resume"}', "resume", None, None),
        ('{"action": "speed", "value": 4}', "speed", 4.0, None),
        ('{"action": "seek", "step": 15}', "seek", None, 15),
    ],
)
def test_controls_are_parsed(text: str, action: str, value: float | None, step: int | None) -> None:
    control = parse_control(text, SPAN)
    assert (control.action, control.value, control.step) == (action, value, step)


@pytest.mark.parametrize(
    "text",
    [
        "pause",
        "[]",
        '{"action": "stop"}',
        '{"action": "speed", "value": 0.01}',
        '{"action": "speed", "value": true}',
        '{"action": "speed"}',
        '{"action": "seek", "step": 9}',
        '{"action": "seek", "step": 21}',
        '{"action": "seek", "step": 12.5}',
    ],
)
def test_bad_controls_are_refused(text: str) -> None:
    with pytest.raises(InvalidParameterError):
        parse_control(text, SPAN)
