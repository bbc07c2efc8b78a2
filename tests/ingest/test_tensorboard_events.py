"""TensorBoard event files as `torch.utils.tensorboard.SummaryWriter` writes them,
read incrementally by byte offset: whole records only, a half-written one held
back, corrupt ones skipped and counted, every scalar read once; and their tags
mapped onto the record groups as the trainers' keys are.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from training_platform.ingest.formats.tensorboard import decode_events, records_of
from training_platform.ingest.formats.tfrecord import HEADER, frame, read_records

torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")


def write_run(directory: Path, steps: int = 50) -> Path:
    writer = torch_tensorboard.SummaryWriter(str(directory))
    for step in range(steps):
        writer.add_scalar("actor/pg_loss", 1.0 / (step + 1), step)
        writer.add_scalar("critic/score/mean", 0.01 * step, step)
        writer.add_scalar("train/loss", 2.0 - 0.01 * step, step)
        writer.add_scalar("my/custom", float(step), step, new_style=True)  # a rank-0 tensor
        writer.add_histogram("weights", torch_tensorboard_tensor(step), step)  # not a scalar
    writer.close()
    (path,) = directory.glob("events.out.tfevents.*")
    return path


def torch_tensorboard_tensor(step: int) -> object:
    import torch

    return torch.arange(10, dtype=torch.float32) * step


def reader_of(data: bytes):  # type: ignore[no-untyped-def]
    return lambda offset, size: data[offset : offset + size]


def read_all(data: bytes, max_bytes: int = 1 << 20) -> tuple[list[bytes], list[str], int]:
    records: list[bytes] = []
    corrupt: list[str] = []
    offset = 0
    for _ in range(100_000):
        batch = read_records(reader_of(data), len(data), offset, max_bytes)
        records += batch.records
        corrupt += batch.corrupt
        offset = batch.offset
        if batch.at_eof:
            break
    return records, corrupt, offset


def test_every_scalar_of_a_real_run_is_read_with_its_step_and_time(tmp_path: Path) -> None:
    data = write_run(tmp_path).read_bytes()
    records, corrupt, offset = read_all(data)
    assert corrupt == [] and offset == len(data)
    decoded = decode_events(records)
    assert decoded.errors == []
    by_tag: dict[str, list[tuple[int, float]]] = {}
    for scalar in decoded.scalars:
        by_tag.setdefault(scalar.tag, []).append((scalar.step, scalar.value))
        assert scalar.wall_time > 1.7e9
    assert sorted(by_tag) == ["actor/pg_loss", "critic/score/mean", "my/custom", "train/loss"]
    assert by_tag["actor/pg_loss"] == [(s, pytest.approx(1.0 / (s + 1))) for s in range(50)]
    assert by_tag["my/custom"] == [(s, float(s)) for s in range(50)]


def test_tags_land_in_the_groups_the_trainers_keys_do(tmp_path: Path) -> None:
    records, _, _ = read_all(write_run(tmp_path, steps=3).read_bytes())
    built = records_of(decode_events(records).scalars)
    assert [record["step"] for record in built] == [0, 1, 2]
    last = built[-1]
    assert last["loss"]["actor_loss"] == pytest.approx(1 / 3)
    assert last["loss"]["total_loss"] == pytest.approx(1.98)
    assert last["reward"]["mean"] == pytest.approx(0.02)
    assert last["extra"]["my/custom"] == 2.0


def test_a_record_half_written_is_held_back_at_every_cut(tmp_path: Path) -> None:
    data = write_run(tmp_path, steps=2).read_bytes()
    whole, _, _ = read_all(data)
    last_start = len(data) - (HEADER + len(whole[-1]) + 4)
    for cut in range(last_start, len(data)):
        records, corrupt, offset = read_all(data[:cut])
        assert corrupt == [], cut
        assert offset == last_start and records == whole[:-1], cut  # waits for the rest
    records, _, offset = read_all(data)
    assert records == whole and offset == len(data)


def test_reads_of_any_size_see_each_record_once(tmp_path: Path) -> None:
    data = write_run(tmp_path, steps=20).read_bytes()
    whole, _, _ = read_all(data)
    for max_bytes in (1, 13, 64, 500):
        assert read_all(data, max_bytes)[0] == whole, max_bytes


def test_a_corrupt_record_is_skipped_and_counted_and_the_rest_is_read() -> None:
    events = [frame(f"payload-{index}".encode()) for index in range(5)]
    bad_data = bytearray(events[1])
    bad_data[HEADER + 2] ^= 0xFF  # its data no longer matches its checksum
    bad_header = bytearray(events[3])
    bad_header[0] ^= 0x01  # its length no longer matches its checksum
    data = events[0] + bytes(bad_data) + events[2] + bytes(bad_header) + events[4]
    records, corrupt, offset = read_all(data)
    assert records == [b"payload-0", b"payload-2", b"payload-4"]
    assert offset == len(data) and len(corrupt) == 2
    assert "bad record data checksum" in corrupt[0] and "bad record header" in corrupt[1]


def test_an_undecodable_event_is_counted_not_fatal(tmp_path: Path) -> None:
    good, _, _ = read_all(write_run(tmp_path, steps=1).read_bytes())
    decoded = decode_events([b"\xff\xff\xff", *good])
    assert len(decoded.errors) == 1 and len(decoded.scalars) == 4


def test_hparams_are_the_runs_config(tmp_path: Path) -> None:
    writer = torch_tensorboard.SummaryWriter(str(tmp_path))
    writer.add_hparams({"lr": 1e-5, "algo": "grpo", "kl": True}, {"hparam/score": 0.5})
    writer.close()
    records = []
    for path in sorted(tmp_path.rglob("events.out.tfevents.*")):
        records += read_all(path.read_bytes())[0]
    decoded = decode_events(records)
    assert decoded.config == {"lr": pytest.approx(1e-5), "algo": "grpo", "kl": True}
    assert [scalar.tag for scalar in decoded.scalars] == ["hparam/score"]


def test_a_length_past_any_event_is_a_bad_header_not_a_wait() -> None:
    huge = struct.pack("<Q", 1 << 40)
    data = huge + b"\0" * 4 + frame(b"after")
    records, corrupt, _ = read_all(data)
    assert records == [b"after"] and len(corrupt) == 1
