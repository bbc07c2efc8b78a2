"""Reading a TensorBoard event file: ours against TensorBoard's own loader.

    .venv/bin/python benchmarks/bench_tensorboard_read.py [--events 200000]

A file of `--events` scalar events (20 tags a step) written by torch's
`SummaryWriter`, then read whole, side by side in one run:

- **ours**: `ingest/formats/tfrecord.py` in 8 MiB reads (checksums by
  google-crc32c) and `ingest/formats/tensorboard.py` (TensorBoard's protobuf
  messages), up to the platform's records, one per step;
- **ours, imported**: what `training-platform import` does with the run
  directory: registered as a TensorBoard job in a fresh SQLite database and
  read to its end by the server's sync service (every batch its own
  exactly-once transaction, rollups included);
- **TensorBoard's `EventFileLoader`** merely loading every event into a list
  (what `tbparse` builds on; without TensorFlow its record reader checks the
  CRCs in pure Python);
- **tbparse**'s `SummaryReader(...).scalars` when installed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from training_platform.ingest.formats.tensorboard import decode_events, records_of
from training_platform.ingest.formats.tfrecord import read_records

TAGS = 20


def write(directory: Path, events: int) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(directory), max_queue=10_000)
    for index in range(events):
        step, tag = divmod(index, TAGS)
        writer.add_scalar(f"group{tag % 4}/series{tag}", 0.001 * index, step)
    writer.close()
    (path,) = directory.glob("events.out.tfevents.*")
    return path


def ours(path: Path) -> int:
    size = path.stat().st_size
    with path.open("rb") as handle:

        def read_at(offset: int, length: int) -> bytes:
            handle.seek(offset)
            return handle.read(length)

        offset, built = 0, 0
        while True:
            batch = read_records(read_at, size, offset, 8 << 20)
            built += len(records_of(decode_events(batch.records).scalars))
            offset = batch.offset
            if batch.at_eof:
                return built


def imported(path: Path) -> tuple[int, float]:
    """The run directory into a fresh SQLite database, as `training-platform import`."""
    return import_into_fresh_database(metrics_dir=str(path.parent), format="tensorboard")


def import_into_fresh_database(**source: str) -> tuple[int, float]:
    """Register one job ("bench") from `source` (`register_job`'s fields) in a fresh
    SQLite platform database and sync it to its end as `import` does: the rows
    stored, and the seconds that took (the database's creation not counted)."""
    from sqlalchemy import func, select

    from training_platform.ingest.registry import register_job
    from training_platform.services import build_services
    from training_platform.settings import Settings
    from training_platform.store.database import make_engine, make_session_factory, prepare_schema
    from training_platform.store.models import TrainingMetric

    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(database_url=f"sqlite:///{scratch}/bench.db", metrics_dir=Path(scratch))
        engine = make_engine(settings.database_url)
        prepare_schema(engine, auto_migrate=True)
        factory = make_session_factory(engine)
        services = build_services(factory, settings)
        try:
            started = time.perf_counter()
            with factory.begin() as session:
                register_job(session, settings, job_id="bench", **source)  # type: ignore[arg-type]
            while not services.sync.sync_job("bench").result.at_eof:
                pass
            elapsed = time.perf_counter() - started
            with factory() as session:
                rows = session.scalar(select(func.count()).select_from(TrainingMetric))
                return int(rows or 0), elapsed
        finally:
            services.close()
            engine.dispose()


def tensorboard_loader(path: Path) -> int:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return len(list(EventFileLoader(str(path)).Load()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args()
    import training_platform.ingest.registry
    import training_platform.services  # noqa: F401

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        path = write(Path(scratch), args.events)
        print(f"{args.events:,} scalar events, {path.stat().st_size / 2**20:.1f} MiB "
              f"(written in {time.perf_counter() - started:.1f} s)")  # fmt: skip
        rows: list[tuple[str, Callable[[Path], int | tuple[int, float]]]] = [
            ("ours: framing, checksums, events, records", ours),
            ("ours, imported into SQLite (rows stored)", imported),
        ]
        rows.append(("TensorBoard's EventFileLoader, events into a list", tensorboard_loader))
        try:
            from tbparse import SummaryReader

            rows.append(
                ("tbparse SummaryReader(...).scalars", lambda p: len(SummaryReader(str(p)).scalars))
            )
        except ImportError:
            print("(tbparse not installed: pip install tbparse to compare with it too)")
        floor = None
        for name, read in rows:
            started = time.perf_counter()
            count = read(path)
            elapsed = time.perf_counter() - started
            if isinstance(count, tuple):  # (rows, seconds the import itself took)
                count, elapsed = count
            floor = floor or elapsed
            print(f"{name:<52} {elapsed:8.2f} s  {args.events / elapsed:>11,.0f} events/s  "
                  f"{elapsed / floor:5.2f}x ours  ({count:,} out)")  # fmt: skip


if __name__ == "__main__":
    main()
