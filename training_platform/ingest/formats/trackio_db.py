"""A Trackio run (`trackio.init(project=..., name=...)`) as a job's metrics.

Trackio keeps each project in one SQLite database, `{project}.db` in its
directory (`TRACKIO_DIR`, default `~/.cache/huggingface/trackio`), in WAL
mode: a `metrics` row per `trackio.log` call (an autoincrement `id`, the
run's name and id, the step, an ISO timestamp and the logged dict as JSON)
and a `configs` row per run. The database is queried where it lies, read
only, never written, so Trackio goes on logging meanwhile:

- the cursor is the last `id` read (`sync_state.offset`), so each row is read
  once and exactly-once storing is the persister's, as for a line file; the
  run's Trackio id is the fingerprint: a run deleted and logged again (a new
  id, a database recreated with ids from 1) is read again from the start;
- a row's numbers map onto the record groups with the trainers' key table
  (TRL's and the HF Trainer's `train/loss`, `train/rewards/...`; verl's
  `actor/pg_loss`, ...), anything else under `extra` with its own name;
  media and other values that are not numbers are passed over; a row whose
  JSON cannot be read is skipped and counted;
- two `log` calls for one step are merged (`merged_steps.py`);
- the run's config (secrets masked when stored, Trackio's own `_` keys left
  out) comes with each batch that has rows;
- its system metrics are its system samples (`trackio_system.py`).
"""

from __future__ import annotations

import json
import math
import sqlite3
from contextlib import closing
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Final

from training_platform.callbacks.wire.records import build_record
from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import merged_metrics_kind
from training_platform.ingest.line_scanner import MAX_ERRORS, ReadBatch, ReadPosition

DATABASE_SUFFIX: Final = ".db"
ROW_BYTES: Final = 256  # a batch's rows: about max_bytes / ROW_BYTES


def database_name(project: str) -> str:
    return f"{project}{DATABASE_SUFFIX}"


def read_run(position: ReadPosition, max_bytes: int, *, path: Path, run: str) -> ReadBatch:
    """The rows of Trackio run `run` after `position` in the database at `path`."""
    if not path.is_file():
        raise MetricsSourceError(f"Trackio database {path} does not exist")
    try:
        with open_database(path) as connection:
            return _read(connection, path, run, position, max(1, max_bytes // ROW_BYTES))
    except sqlite3.Error as exc:
        raise MetricsSourceError(f"cannot read Trackio database {path}: {exc}") from None


def open_database(path: Path) -> closing[sqlite3.Connection]:
    """The project database, read only (mode=ro: never creates, never writes; WAL lets
    Trackio write meanwhile), closed when the `with` block ends (a sqlite3
    connection's own `with` only ends a transaction)."""
    return closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5))


def _read(
    connection: sqlite3.Connection, path: Path, run: str, position: ReadPosition, limit: int
) -> ReadBatch:
    run_id = run_id_of(connection, run)
    if run_id is None:  # not logged yet
        return ReadBatch(records=[], position=position, file_size=0)
    after, reset = position.offset, False
    if position.fingerprint is not None and position.fingerprint != run_id:
        after, reset = 0, True  # another run of that name now: read it from its start
    rows = connection.execute(
        "SELECT id, step, timestamp, metrics FROM metrics"
        " WHERE run_name = ? AND run_id = ? AND id > ? ORDER BY id LIMIT ?",
        (run, run_id, after, limit),
    ).fetchall()
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    malformed = 0
    for row_id, step, stamp, payload in rows:
        try:
            records.append(_record(step, stamp, payload))
        except (TypeError, ValueError) as exc:
            malformed += 1
            if len(errors) < MAX_ERRORS:
                errors.append(f"row {row_id}: {exc}"[:200])
    last = rows[-1][0] if rows else after
    return ReadBatch(
        records=records,
        position=ReadPosition(last, run_id),
        malformed=malformed,
        reset=reset,
        at_eof=len(rows) < limit,
        file_size=last,
        errors=errors,
        about=_about(connection, run_id) if rows else None,
    )


def run_id_of(connection: sqlite3.Connection, run: str) -> str | None:
    found = connection.execute(
        "SELECT run_id FROM metrics WHERE run_name = ? ORDER BY id DESC LIMIT 1", (run,)
    ).fetchone()
    return None if found is None else str(found[0])


def _record(step: Any, stamp: Any, payload: Any) -> dict[str, Any]:
    if type(step) is not int or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    logged = json.loads(payload)
    if not isinstance(logged, dict):
        raise ValueError("metrics must be a JSON object")
    numbers = {
        key: float(value)
        for key, value in logged.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    return build_record(step, numbers, timestamp=seconds(stamp))


def seconds(stamp: Any) -> float | None:
    try:
        seconds = datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) else None


def _about(connection: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    found = connection.execute("SELECT config FROM configs WHERE run_id = ?", (run_id,)).fetchone()
    if found is None:
        return None
    try:
        config = json.loads(found[0])
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    return {"config": {key: value for key, value in config.items() if not str(key).startswith("_")}}


def trackio_kind(directory: str, database: str, run: str) -> LineFileKind:
    """The metrics of Trackio run `run` in the project database `database` (a name in
    Trackio's `directory`)."""
    return merged_metrics_kind(
        file=database, query=partial(read_run, path=Path(directory) / database, run=run)
    )
