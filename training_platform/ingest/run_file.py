"""`{job_id}_run.json` onto `run_files` and `job_tags` (docs/contract.md, run metadata).

Read when its signature (size, mtime, inode) changed since this process last
read it, or when the job's status changed (a restarted run rewrites both),
so an unchanged run file costs one `stat` per sync. The bytes' digest is
stored: a restarted server reading the same file again writes nothing.
A refused version (too large, not JSON, not an object, another job's) is
counted once and explained; what the last good version said is kept.
Secrets are masked before anything is stored, by the callback's rules
(`callbacks/wire/secrets.py`): a file from an older callback, another tool or a
hand is not trusted to have done it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.run_file import RUN_SUFFIX as RUN_SUFFIX  # re-exported
from training_platform.callbacks.wire.secrets import mask_run
from training_platform.ingest.readers import MetricsReader
from training_platform.store.models import RunFile
from training_platform.store.run_meta import RUN_TAGS, clean_tags, replace_tags
from training_platform.store.storable import storable_text

logger = logging.getLogger(__name__)

RUN_MAX_BYTES: Final = 1 << 20
MAX_DEPTH: Final = 64
TEXT_CHARS: Final = 256  # project, name: the columns' width
ABOUT_KEYS: Final = ("framework", "git", "host", "command", "started_at", "config_dropped")


def parse_run_file(data: bytes, job_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """The run file's object, or None and why it is refused."""
    if len(data) > RUN_MAX_BYTES:
        return None, f"over {RUN_MAX_BYTES} bytes"
    try:
        parsed = json.loads(data.decode("utf-8-sig"))  # accepts NaN/Infinity tokens
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"not JSON: {str(exc)[:200]}"
    if not isinstance(parsed, dict):
        return None, "not a JSON object"
    named = parsed.get("job_id")
    if named is not None and named != job_id:
        return None, f"names another job ({str(named)[:128]!r})"
    return parsed, None


def json_safe(value: Any, depth: int = 0) -> Any:
    """`value` storable as JSON on both databases and servable by orjson:
    non-finite numbers as their names, integers beyond 64 bits as text, lone
    surrogates replaced, nesting beyond `MAX_DEPTH` cut."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, str):
        return storable_text(value)
    if depth >= MAX_DEPTH:
        return f"<dropped: nested deeper than {MAX_DEPTH} levels>"
    if isinstance(value, dict):
        return {storable_text(str(k)): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(item, depth + 1) for item in value]
    return storable_text(str(value))


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return storable_text(value.strip(), TEXT_CHARS)


def run_columns(parsed: dict[str, Any]) -> dict[str, Any]:
    """The `run_files` columns a good run file sets, its secrets masked."""
    parsed = mask_run(parsed)
    config = parsed.get("config")
    if config is not None and not isinstance(config, dict):
        config = {"value": config}
    about = {key: json_safe(parsed[key]) for key in ABOUT_KEYS if key in parsed}
    if not isinstance(about.get("started_at", 0.0), float | int) or isinstance(
        about.get("started_at"), bool | str
    ):
        about.pop("started_at", None)  # a time must be a finite number (json_safe named the rest)
    tags = parsed.get("tags")
    return {
        "project": _text(parsed.get("project")),
        "name": _text(parsed.get("name")),
        "tags": clean_tags(tags if isinstance(tags, list) else []),
        "config": None if config is None else json_safe(config),
        "about": about or None,
        "file_error": None,
    }


def sync_run_file(
    factory: sessionmaker[Session], job_id: str, reader: MetricsReader, *, force: bool = False
) -> bool:
    """Store what the job's run file says when it changed; True when stored rows changed.

    `force` reads it even when its signature looks the same (the status
    changed: a new run may have rewritten it within the same second).
    """
    signature = reader.file_signature(RUN_SUFFIX)
    if signature is None:  # no run file (yet): what an earlier one said stays
        reader.run_file_seen = None
        return False
    if signature == reader.run_file_seen and not force:
        return False
    data = reader.read_small_file(RUN_SUFFIX, RUN_MAX_BYTES + 1)
    if data is None:
        return False
    digest = hashlib.sha256(data).hexdigest()
    changed = _store(factory, job_id, digest, data, reader.location(RUN_SUFFIX))
    reader.run_file_seen = signature
    return changed


def _store(
    factory: sessionmaker[Session], job_id: str, digest: str, data: bytes, where: str
) -> bool:
    with factory() as session:
        row = session.get(RunFile, job_id)
        if row is not None and row.digest == digest:
            return False  # read before (by this process or an earlier one)
        parsed, error = parse_run_file(data, job_id)
        if row is None:
            row = RunFile(job_id=job_id, file_refusals=0)
            session.add(row)
        row.digest, row.read_at = digest, time.time()
        if error is not None:
            logger.warning("run file %s refused: %s", where, error)
            row.file_error = error
            row.file_refusals = (row.file_refusals or 0) + 1
        else:
            assert parsed is not None
            for column, value in run_columns(parsed).items():
                setattr(row, column, value)
            session.flush()
            replace_tags(session, job_id, RUN_TAGS, row.tags or [])
        session.commit()
        return True


def store_run_about(
    session: Session,
    job_id: str,
    *,
    config: dict[str, Any] | None = None,
    project: str | None = None,
    name: str | None = None,
    tags: list[str] | None = None,
    ended: dict[str, Any] | None = None,
) -> None:
    """What another tool's files say of the run (its config: TensorBoard's hparams,
    MLflow's params, ...; its project, name and tags; `ended`: how it ended, W&B's
    exit record) where a run file would say it, secrets masked. Only what is given
    is set; in the caller's transaction."""
    given = {"config": config, "project": project, "name": name, "tags": tags}
    columns = run_columns({key: value for key, value in given.items() if value is not None})
    row = session.get(RunFile, job_id)
    if row is None:
        row = RunFile(job_id=job_id, file_refusals=0, read_at=time.time())
        session.add(row)
    for column, value in given.items():
        if value is not None:
            setattr(row, column, columns[column])
    if ended is not None:  # beside a run file's `about` keys, never served as one of them
        row.about = {**(row.about or {}), "ended": json_safe(ended)}
    row.read_at = time.time()
    session.flush()  # a second call in this transaction finds the row
    if tags is not None:
        replace_tags(session, job_id, RUN_TAGS, row.tags or [])


def stored_ending(factory: sessionmaker[Session], job_id: str) -> dict[str, Any] | None:
    """How the run ended as its tool's files said (`store_run_about`'s `ended`), if so."""
    with factory() as session:
        about = session.scalar(select(RunFile.about).where(RunFile.job_id == job_id))
    ended = (about or {}).get("ended")
    return ended if isinstance(ended, dict) else None
