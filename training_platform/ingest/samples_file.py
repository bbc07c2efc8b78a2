"""The samples file as a kind of line file: `{job_id}_samples.jsonl` -> `samples`.

Everything about reading it exactly once is the persister's (`ingest/file_kinds.py`);
this module only says how a decoded sample becomes rows:

- a prompt's text is stored once per job (`sample_prompts`, keyed by its
  sha256): a GRPO group's completions share their prompt, so a run costs
  about its completions plus its distinct prompts, not a prompt per sample;
- the newest line for (step, index) wins, as a rewritten step of a resumed
  run must;
- values are made storable on both databases: NUL and lone surrogates out of
  the texts, a non-finite reward kept by name (`reward_nonfinite`), a
  component's by name in `rewards` (the API's spelling), `extra` bounded as
  the metrics' JSON groups are.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Final

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.samples import SAMPLES_SUFFIX, decode_sample_line
from training_platform.callbacks.wire.schema import nonfinite_name
from training_platform.ingest.file_kinds import LineFileKind, StoredRows
from training_platform.store.bulk_write import UPSERT_CHUNK, chunks
from training_platform.store.database import dialect_insert, upsert_sql
from training_platform.store.models import Sample, SamplePrompt
from training_platform.store.storable import storable_json_group, storable_text

_IN_CHUNK: Final = 500  # digests per IN (...) list
_UPDATED: Final = (
    "timestamp",
    "prompt_id",
    "completion",
    "reward",
    "reward_nonfinite",
    "rewards",
    "group_key",
    "response_length",
    "completion_chars",
    "finish_reason",
    "extra",
    "received_at",
)
_KEY_COLUMNS: Final = ("job_id", "step", "sample_index")
_JSON_CHUNK: Final = 1_000  # rows per statement on PostgreSQL: ~2.5 MB of JSON
_UPSERT_FROM_JSON: Final = upsert_sql(
    "samples",
    (*_KEY_COLUMNS, *_UPDATED),
    _KEY_COLUMNS,
    "format",
    "json_populate_recordset(NULL::samples, %s::json)",
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _prompt_ids(session: Session, job_id: str, prompts: dict[str, str]) -> dict[str, int]:
    """digest -> `sample_prompts.id` for each prompt (stored first when new)."""
    insert = dialect_insert(session)(SamplePrompt.__table__)
    rows = [{"job_id": job_id, "digest": digest, "text": text} for digest, text in prompts.items()]
    for chunk in chunks(rows, UPSERT_CHUNK):
        session.execute(insert.on_conflict_do_nothing(index_elements=["job_id", "digest"]), chunk)
    digests = list(prompts)
    ids: dict[str, int] = {}
    for start in range(0, len(digests), _IN_CHUNK):
        query = select(SamplePrompt.digest, SamplePrompt.id).where(
            SamplePrompt.job_id == job_id,
            SamplePrompt.digest.in_(digests[start : start + _IN_CHUNK]),
        )
        ids.update((digest, prompt_id) for digest, prompt_id in session.execute(query))
    return ids


def _rewards(rewards: dict[str, float | None] | None) -> dict[str, Any] | None:
    if rewards is None:
        return None
    return {
        storable_text(name): value
        if value is None or math.isfinite(value)
        else nonfinite_name(value)
        for name, value in rewards.items()
    }


def _row(
    job_id: str, sample: dict[str, Any], prompt_id: int, received_at: float, notes: list[str]
) -> dict[str, Any]:
    reward = sample["reward"]
    finite = reward is None or math.isfinite(reward)
    completion = storable_text(sample["completion"])
    extra = sample["extra"]
    if extra is not None:
        where = f"step {sample['step']} sample {sample['index']}: extra"
        extra, _ = storable_json_group(extra, where, notes)
    group, finish = sample["group"], sample["finish_reason"]
    return {
        "job_id": job_id,
        "step": sample["step"],
        "sample_index": sample["index"],
        "timestamp": sample["timestamp"],
        "prompt_id": prompt_id,
        "completion": completion,
        "reward": reward if finite else None,
        "reward_nonfinite": None if finite else nonfinite_name(reward),
        "rewards": _rewards(sample["rewards"]),
        "group_key": None if group is None else storable_text(group),
        "response_length": sample["response_length"],
        "completion_chars": len(completion),
        "finish_reason": None if finish is None else storable_text(finish),
        "extra": extra,
        "received_at": received_at,
    }


def store_samples(
    session: Session,
    job_id: str,
    samples: list[dict[str, Any]],
    received_at: float,
    notes: list[str],
) -> StoredRows:
    """Upsert the batch's samples; a later line for the same (step, index) wins."""
    # One statement must not touch a row twice (PostgreSQL refuses it).
    samples = list({_key(sample): sample for sample in samples}.values())
    texts = [storable_text(sample["prompt"]) for sample in samples]
    digests = [_digest(text) for text in texts]
    ids = _prompt_ids(session, job_id, dict(zip(digests, texts, strict=True)))
    rows = [
        _row(job_id, sample, ids[digest], received_at, notes)
        for sample, digest in zip(samples, digests, strict=True)
    ]
    if session.get_bind().dialect.name == "postgresql":
        # One statement per chunk, its rows one JSON parameter, where psycopg's
        # executemany runs a statement per row: the vocabulary's trigger
        # (store/word_search.py) then takes a chunk's words once, and nothing
        # is compiled per row (SQLAlchemy's multi-row VALUES cost a quarter
        # of the sync). The JSON columns are nested as they are.
        connection = session.connection()
        for chunk in chunks(rows, _JSON_CHUNK):
            connection.exec_driver_sql(_UPSERT_FROM_JSON, (orjson.dumps(chunk).decode(),))
        return StoredRows(len(rows))
    insert = dialect_insert(session)(Sample.__table__)
    upsert = insert.on_conflict_do_update(
        index_elements=list(_KEY_COLUMNS),
        set_={column: insert.excluded[column] for column in _UPDATED},
    )
    for chunk in chunks(rows, UPSERT_CHUNK):
        session.execute(upsert, chunk)
    return StoredRows(len(rows))


def _key(sample: dict[str, Any]) -> tuple[int, int]:
    return sample["step"], sample["index"]


SAMPLES = LineFileKind(
    name="samples",
    suffix=SAMPLES_SUFFIX,
    decode=decode_sample_line,
    store=store_samples,
    key=_key,
    required=False,  # a run may log no samples at all
)
