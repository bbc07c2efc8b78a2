"""Incremental reading of ``{job_id}_metrics.jsonl``: one set of cases, both readers.

Every case marked with the `source` fixture runs against the local reader and
against the SSH reader talking to a real sshd on 127.0.0.1 (skipped, with the
reason, where sshd is missing). The SSH-only cases are in
``test_metrics_reader_ssh.py``.
"""

from __future__ import annotations

import math
import os
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from training_platform.callbacks.wire.lines import encode_record
from training_platform.errors import InvalidJobIdError, MetricsSourceError
from training_platform.ingest.line_scanner import CHUNK_BYTES, FINGERPRINT_BYTES, scan_lines
from training_platform.ingest.readers import (
    LocalMetricsReader,
    MetricsReader,
    ReadBatch,
    ReadPosition,
    discover_job_ids,
)
from training_platform.ingest.ssh_reader import SSHMetricsReader


def line(step: int, **groups: Any) -> bytes:
    record = {"step": step, "timestamp": 1_700_000_000.0 + step, "loss": {"actor_loss": 0.5}}
    record.update(groups)
    return encode_record(record)


def lines(steps: range) -> bytes:
    return b"".join(line(step) for step in steps)


def steps_of(batch: ReadBatch) -> list[int]:
    return [record["step"] for record in batch.records]


@dataclass
class Source:
    """Where a test writes the job's files, and how it gets a reader for them."""

    kind: str
    directory: Path
    factory: Callable[..., MetricsReader]
    readers: list[MetricsReader] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.directory / "job_metrics.jsonl"

    def reader(self, job_id: str = "job", **options: Any) -> MetricsReader:
        reader = self.factory(job_id, **options)
        self.readers.append(reader)
        return reader

    def append(self, data: bytes) -> None:
        with open(self.path, "ab") as file:
            file.write(data)

    def replace(self, data: bytes) -> None:
        """What a restarted run does: a new file renamed over the old one."""
        tmp = self.directory / "job_metrics.jsonl.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.path)


def read_all(
    reader: MetricsReader, position: ReadPosition | int = 0, **options: Any
) -> tuple[list[int], ReadPosition, list[ReadBatch]]:
    """Call until at_eof, like the persister does; bounded so a bug cannot hang."""
    batches: list[ReadBatch] = []
    for _ in range(10_000):
        batch = reader.read_metrics_incremental(position, **options)
        batches.append(batch)
        position = batch.position
        if batch.at_eof:
            return [s for b in batches for s in steps_of(b)], position, batches
    raise AssertionError("reader never reached end of file")


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Source]:
    if request.param == "local":

        def local(job_id: str, **options: Any) -> MetricsReader:
            return LocalMetricsReader(job_id, tmp_path, **options)

        made = Source("local", tmp_path, local)
    else:
        sshd = request.getfixturevalue("sshd")

        def remote(job_id: str, **options: Any) -> MetricsReader:
            return SSHMetricsReader(job_id, str(sshd.remote_dir), sshd.target(), **options)

        made = Source("ssh", sshd.remote_dir, remote)
    yield made
    for reader in made.readers:
        reader.close()


def test_reads_complete_lines_and_says_where_to_continue(source: Source) -> None:
    source.append(lines(range(3)))
    batch = source.reader().read_metrics_incremental(0)
    assert steps_of(batch) == [0, 1, 2]
    assert batch.new_offset == batch.file_size == source.path.stat().st_size
    assert batch.at_eof and not batch.reset
    assert batch.records[0]["loss"] == {"actor_loss": 0.5}
    assert batch.position.fingerprint is not None


def test_nothing_new_returns_nothing_at_the_same_position(source: Source) -> None:
    source.append(lines(range(3)))
    reader = source.reader()
    first = reader.read_metrics_incremental(0)
    again = reader.read_metrics_incremental(first.position)
    assert again.records == [] and again.position == first.position and not again.reset


def test_partial_last_line_waits_for_its_newline(source: Source) -> None:
    reader = source.reader()
    whole = line(1)
    source.append(line(0) + whole[:10])
    batch = reader.read_metrics_incremental(0)
    assert steps_of(batch) == [0]
    assert batch.new_offset == len(line(0))  # the partial line is not consumed
    source.append(whole[10:-1])  # everything but the newline
    assert reader.read_metrics_incremental(batch.position).records == []
    source.append(b"\n")
    done = reader.read_metrics_incremental(batch.position)
    assert steps_of(done) == [1] and done.malformed == 0


def test_many_small_appends_are_each_read_exactly_once(source: Source) -> None:
    reader = source.reader()
    stream = lines(range(40))
    position: ReadPosition | int = 0
    seen: list[int] = []
    for start in range(0, len(stream), 23):  # 23 bytes at a time: lines split everywhere
        source.append(stream[start : start + 23])
        batch = reader.read_metrics_incremental(position)
        seen += steps_of(batch)
        position = batch.position
        assert not batch.reset and batch.malformed == 0
    assert seen == list(range(40))


def test_truncation_is_detected_and_the_new_content_read_from_the_start(source: Source) -> None:
    source.append(lines(range(10)))
    reader = source.reader()
    _, position, _ = read_all(reader)
    source.path.write_bytes(lines(range(100, 103)))  # truncated and rewritten, shorter
    batch = reader.read_metrics_incremental(position)
    assert batch.reset
    assert steps_of(batch) == [100, 101, 102]


def test_replacement_by_a_longer_file_is_detected(source: Source) -> None:
    source.append(lines(range(3)))
    reader = source.reader()
    _, position, _ = read_all(reader)
    source.replace(lines(range(50, 60)))  # a restarted run: bigger than our offset
    assert source.path.stat().st_size > position.offset
    batch = reader.read_metrics_incremental(position)
    assert batch.reset
    assert steps_of(batch) == list(range(50, 60))


def test_replacement_while_nothing_was_reading_is_detected(source: Source) -> None:
    source.append(lines(range(5)))
    first = source.reader()
    _, position, _ = read_all(first)
    first.close()  # the server stops; the position stays committed
    source.replace(lines(range(70, 90)))
    batch = source.reader().read_metrics_incremental(position)  # a new server process
    assert batch.reset and steps_of(batch) == list(range(70, 90))


def test_a_small_file_keeps_its_identity_as_it_grows(source: Source) -> None:
    reader = source.reader()
    source.append(line(0))  # far shorter than the fingerprint length
    batch = reader.read_metrics_incremental(0)
    assert batch.position.fingerprint is not None
    assert batch.position.fingerprint.startswith(f"{len(line(0))}:")
    source.append(lines(range(1, 60)))
    grown = reader.read_metrics_incremental(batch.position)
    assert not grown.reset and steps_of(grown) == list(range(1, 60))
    assert grown.position.fingerprint is not None
    assert grown.position.fingerprint.startswith(f"{FINGERPRINT_BYTES}:")  # extended
    source.append(line(60))
    assert steps_of(reader.read_metrics_incremental(grown.position)) == [60]


def test_an_int_position_is_an_offset_without_fingerprint(source: Source) -> None:
    source.append(lines(range(4)))
    batch = source.reader().read_metrics_incremental(2 * len(line(0)))
    assert steps_of(batch) == [2, 3] and not batch.reset
    assert batch.position.fingerprint is not None


def test_an_offset_past_the_end_means_the_file_was_truncated(source: Source) -> None:
    source.append(lines(range(2)))
    batch = source.reader().read_metrics_incremental(10_000)
    assert batch.reset and steps_of(batch) == [0, 1]


def test_a_corrupt_fingerprint_rereads_from_the_start(source: Source) -> None:
    source.append(lines(range(3)))
    batch = source.reader().read_metrics_incremental(ReadPosition(50, "garbage"))
    assert batch.reset and steps_of(batch) == [0, 1, 2]


def test_a_20_mb_line_is_skipped_and_the_lines_around_it_kept(source: Source) -> None:
    source.append(line(0) + b'{"step": 1, "x": "' + b"x" * (20 << 20) + b'"}\n' + line(2))
    steps, position, batches = read_all(source.reader())
    assert steps == [0, 2]
    assert sum(b.oversized for b in batches) == 1
    assert sum(b.malformed for b in batches) == 0
    assert position.offset == source.path.stat().st_size and not position.discarding
    assert any(f"line at byte {len(line(0))}" in e for b in batches for e in b.errors)


def test_an_overlong_line_still_being_written_is_skipped_across_calls(source: Source) -> None:
    reader = source.reader(max_line_bytes=1024)
    source.append(line(0) + b'{"step": 1, "x": "' + b"x" * 5000)  # no newline yet
    first = reader.read_metrics_incremental(0)
    assert steps_of(first) == [0] and first.oversized == 1
    assert first.position.discarding and first.position.offset == first.file_size
    source.append(b"x" * 3000)
    middle = reader.read_metrics_incremental(first.position)
    assert middle.records == [] and middle.oversized == 0 and middle.position.discarding
    source.append(b'"}\n' + line(2))
    last = reader.read_metrics_incremental(middle.position)
    assert steps_of(last) == [2] and last.oversized == 0  # counted once, when first seen
    assert not last.position.discarding


def test_malformed_lines_in_the_middle_do_not_stop_the_lines_after_them(source: Source) -> None:
    bad = [b"{not json\n", b"[1, 2]\n", b'{"no_step": 1}\n', b'{"step": "\xff\xfe"}\n']
    data = line(0)
    for step, bad_line in enumerate(bad, start=1):
        data += bad_line + line(step)
    source.append(data)
    batch = source.reader().read_metrics_incremental(0)
    assert steps_of(batch) == [0, 1, 2, 3, 4]
    assert batch.malformed == 4
    assert batch.errors[0].startswith(f"line at byte {len(line(0))}: ")


def test_blank_lines_are_skipped_silently(source: Source) -> None:
    source.append(line(0) + b"\n" + b"   \n" + b"\r\n" + line(1))
    batch = source.reader().read_metrics_incremental(0)
    assert steps_of(batch) == [0, 1]
    assert batch.malformed == 0 and batch.errors == []


def test_nan_and_infinity_tokens_are_read(source: Source) -> None:
    source.append(b'{"step": 0, "timestamp": 1.0, "loss": {"actor_loss": NaN,')
    source.append(b' "critic_loss": Infinity, "total_loss": -Infinity}}\n')
    (record,) = source.reader().read_metrics_incremental(0).records
    assert math.isnan(record["loss"]["actor_loss"])
    assert record["loss"]["critic_loss"] == math.inf
    assert record["loss"]["total_loss"] == -math.inf


def test_crlf_line_endings_and_a_bom_are_accepted(source: Source) -> None:
    crlf = [line(step).replace(b"\n", b"\r\n") for step in range(3)]
    source.append(b"\xef\xbb\xbf" + b"".join(crlf))
    batch = source.reader().read_metrics_incremental(0)
    assert steps_of(batch) == [0, 1, 2] and batch.malformed == 0


def test_max_bytes_pages_through_the_file_without_loss_or_duplicates(source: Source) -> None:
    source.append(lines(range(200)))
    steps, _, batches = read_all(source.reader(), max_bytes=1000)
    assert steps == list(range(200))
    assert len(batches) > 10
    assert not any(b.at_eof for b in batches[:-1]) and batches[-1].at_eof


def test_max_bytes_smaller_than_one_line_still_makes_progress(source: Source) -> None:
    source.append(lines(range(5)))
    steps, _, batches = read_all(source.reader(max_bytes=7))
    assert steps == list(range(5))
    assert all(len(b.records) >= 1 for b in batches[:-1])


def test_a_missing_metrics_file_is_a_clear_error(source: Source) -> None:
    reader = source.reader()
    assert not reader.metrics_file_exists()
    with pytest.raises(MetricsSourceError, match=r"job_metrics\.jsonl does not exist"):
        reader.read_metrics_incremental(0)
    source.append(line(0))
    assert reader.metrics_file_exists()


def test_a_directory_in_place_of_the_metrics_file_is_refused(source: Source) -> None:
    source.path.mkdir()
    with pytest.raises(MetricsSourceError, match="not a regular file"):
        source.reader().read_metrics_incremental(0)


def test_a_fifo_in_place_of_the_files_does_not_hang_the_reader(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "job_metrics.jsonl")
    os.mkfifo(tmp_path / "job_status.json")
    reader = LocalMetricsReader("job", tmp_path)
    with pytest.raises(MetricsSourceError, match="not a regular file"):
        reader.read_metrics_incremental(0)
    assert reader.read_status() is None


def test_read_status_parses_the_status_file(
    source: Source, caplog: pytest.LogCaptureFixture
) -> None:
    reader = source.reader()
    status_path = source.directory / "job_status.json"
    assert reader.read_status() is None
    status_path.write_text('{"job_id": "job", "status": "running", "current_step": 3}')
    assert reader.read_status() == {"job_id": "job", "status": "running", "current_step": 3}
    status_path.write_text('{"job_id": "job", "status": "runn')  # a non-atomic writer
    assert reader.read_status() is None
    assert "unparsable status file" in caplog.text
    status_path.write_text("[1, 2]")
    assert reader.read_status() is None


def test_invalid_job_ids_are_refused(tmp_path: Path) -> None:
    for job_id in ("../etc/passwd", "", ".hidden", "a/b"):
        with pytest.raises(InvalidJobIdError):
            LocalMetricsReader(job_id, tmp_path)


def test_discover_job_ids_lists_metrics_files_with_valid_ids(tmp_path: Path) -> None:
    for name in ("b_metrics.jsonl", "a.1_metrics.jsonl", "-bad_metrics.jsonl", "c_status.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "dir_metrics.jsonl").mkdir()
    assert discover_job_ids(tmp_path) == ["a.1", "b"]
    assert discover_job_ids(tmp_path / "missing") == []


def test_reading_new_lines_costs_the_same_in_a_small_and_a_large_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seek, never rescan: the bytes read depend on what is new, not on the offset."""
    read_bytes = 0
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        nonlocal read_bytes
        data = real_pread(fd, size, offset)
        read_bytes += len(data)
        return data

    costs = []
    for count in (1_000, 50_000):
        directory = tmp_path / str(count)
        directory.mkdir()
        path = directory / "job_metrics.jsonl"
        path.write_bytes(lines(range(count)))
        reader = LocalMetricsReader("job", directory)
        _, position, _ = read_all(reader)
        with open(path, "ab") as file:
            file.write(lines(range(count, count + 100)))
        monkeypatch.setattr(os, "pread", counting_pread)
        read_bytes = 0
        batch = reader.read_metrics_incremental(position)
        monkeypatch.setattr(os, "pread", real_pread)
        assert len(batch.records) == 100
        costs.append(read_bytes)
    new_bytes = len(lines(range(50_000, 50_100)))
    assert costs[1] <= new_bytes + FINGERPRINT_BYTES
    assert costs[1] <= costs[0] * 1.05


def test_an_overlong_line_never_sits_in_memory_whole(tmp_path: Path) -> None:
    path = tmp_path / "job_metrics.jsonl"
    with open(path, "wb") as file:
        file.write(line(0) + b'{"step": 1, "x": "')
        for _ in range(20):
            file.write(b"x" * (1 << 20))
        file.write(b'"}\n' + line(2))
    reader = LocalMetricsReader("job", tmp_path, max_bytes=64 << 20)  # one call reads it all
    tracemalloc.start()
    try:
        batch = reader.read_metrics_incremental(0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert steps_of(batch) == [0, 2] and batch.oversized == 1 and batch.at_eof
    assert peak < 4 * CHUNK_BYTES  # the line is 20 MiB


def test_scan_reads_in_bounded_chunks() -> None:
    data = line(0) + b"y" * (5 << 20) + b"\n" + line(1)
    sizes: list[int] = []

    def read_at(offset: int, size: int) -> bytes:
        sizes.append(size)
        return data[offset : offset + size]

    batch = scan_lines(
        read_at, len(data), ReadPosition(), max_line_bytes=1 << 20, max_bytes=64 << 20
    )
    assert steps_of(batch) == [0, 1] and batch.oversized == 1
    assert max(sizes) <= CHUNK_BYTES
