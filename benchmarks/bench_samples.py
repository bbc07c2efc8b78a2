"""Generated samples: ingestion, disk, serving one step and text search, side by side in one run.

    .venv/bin/python benchmarks/bench_samples.py [--steps 100] [--rounds 3] [--quick]
        [--backends sqlite,postgresql] [--search-samples 262144]

What a GRPO rollout logs: `--samples-per-step` samples (256) of about
`--chars` characters (2,000: a ~500-character prompt shared by a group of 8,
a ~1,500-character completion, lengths varying 0.4-1.6x), each with a reward,
two reward components, a group uid, a response length, a finish reason and a
small `extra`; the text is drawn from a pool of varied math-reasoning prose.
The file is written with `build_sample` + `encode_record`, as the callback
writes it. For each backend:

1. **Ingestion** of that samples file through the real persister
   (`ingest.persister.sync_file` with `ingest.samples_file.SAMPLES`, a
   `LocalMetricsReader`, default batch size), against (a) the metrics path
   (`sync_metrics_from_file`) on a metrics file of the same byte size, and
   (b) the raw database floor: the same samples as pre-built rows inserted
   with `sqlite3.executemany` / psycopg `COPY` into the same `samples` table,
   their prompts inserted beforehand (not timed). A fresh database for each
   side and round; rounds interleaved; the best of each compared (the slower
   runs measure the neighbours), per-round ratios printed too. Both sides
   maintain the text search's indexes (SQLite's FTS5 triggers fire on the
   floor's raw inserts too; PostgreSQL's GIN indexes and the vocabulary's
   statement trigger, which fires on COPY).
2. **Disk**: the database after our ingestion (SQLite: the file after a WAL
   checkpoint; PostgreSQL: `pg_total_relation_size` of `samples`,
   `sample_prompts` and the word index's vocabulary `sample_words`) against
   the JSONL file.
3. **Serving one step** (all its samples) through `sample_page` with a step
   filter, and through the HTTP API (`TestClient`, `GET
   /api/monitoring/{job}/samples?step=N&limit=256`), on random steps of the
   `--search-samples` database: p50 / p95. Target <= 50 ms.
4. **Text search** (`q`, a case-insensitive substring of prompt or
   completion) over `--search-samples` samples (loaded with the raw floor
   path, to save time), `sample_page(q=..., limit=100)`: a rare word (in a
   handful of samples: found through the index) and a common one (in
   ~1 sample in 5: too many candidates for the index, so the scan in step
   order, whose first 100 hits come early). Target <= 300 ms.

`--quick` scales everything down for development. The machine is shared and
noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_ingest import realistic_line  # the metrics lines bench_ingest.py measures
from fastapi.testclient import TestClient

from training_platform.api.main import create_app
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample, decode_sample_line
from training_platform.history.samples_query import SampleFilter, sample_page
from training_platform.ingest.metrics_file import sync_metrics_from_file
from training_platform.ingest.persister import sync_file
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.registry import discover_jobs
from training_platform.ingest.samples_file import SAMPLES
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory, prepare_schema
from training_platform.store.models import Sample, SamplePrompt
from training_platform.store.stored_text import pack_text, register_sqlite_functions

JOB = "bench"
GROUP = 8  # GRPO: completions per prompt
RARE = "zanzibar"  # in RARE_HITS samples, written "Zanzibar": the search must ignore case
RARE_HITS = 3
COMMON = "wait"  # in about one sample in five ("Wait, ..."), as reasoning models write
SERVE_TARGET_MS = 50.0
SEARCH_TARGET_MS = 300.0
POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
# The tables' columns, in table order, for the raw floor's INSERT / COPY.
SAMPLE_COLUMNS = tuple(column.name for column in Sample.__table__.columns)
PROMPT_COLUMNS = tuple(column.name for column in SamplePrompt.__table__.columns)

# Words of math-reasoning prose; none holds RARE or COMMON inside it.
_PROSE = (
    "the the the the of of of to to and and a a a is is in in we we that it it this for be",
    "so so then then let let us number numbers sum total value values each per times equal",
    "equals find found answer answers step steps first second third next last now since",
    "because therefore thus hence which where when if not no yes can must will would should",
    "have has had get gets got give gives given take takes need needs know known check",
    "checks verify verified compute computed calculate calculated multiply divide divided",
    "add added subtract subtracted minus plus over under half twice three four five six",
    "seven eight nine ten hundred thousand dozen percent ratio rate price cost costs dollar",
    "dollars cents hours minutes days weeks apples oranges books pages students teacher",
    "class boxes bags cars miles speed distance time area length width height square",
    "triangle circle radius angle degrees side sides perimeter volume cube prime factor",
    "factors integer integers remainder fraction fractions decimal digits product quotient",
    "difference more less than greater smaller largest smallest between both either",
    "problem problems question asks asked means mean average median left right remaining",
    "altogether initially finally originally after before every all some many few how much",
    "what who Janet John Maria Tom Sarah store market farm school bakery garden train bus",
    "equation equations solve solving solution variable expression simplify substitute",
    "x y z n k m p q r s t",
)
VOCAB = [word for line in _PROSE for word in line.split()]
SYMBOLS = ("=", "+", "-", "*", "/", "(", ")", ",", ".", ":", "$", "%", r"\frac{1}{2}", "x^2")


@dataclass
class Pool:
    """A long stretch of prose; samples are slices of it at random offsets."""

    text: str

    @classmethod
    def make(cls, rng: random.Random, chars: int = 4_000_000) -> Pool:
        weights = [1.0 / (1 + rank) ** 0.9 for rank in range(len(VOCAB))]  # Zipf-like
        words: list[str] = []
        size = 0
        while size < chars:
            chunk = rng.choices(VOCAB, weights, k=10_000)
            for position in range(0, len(chunk), rng.randint(8, 20)):
                chunk[position] = (
                    rng.choice(SYMBOLS) if rng.random() < 0.5 else str(rng.randrange(10_000))
                )
            for position in range(0, len(chunk), 2_000):  # ~1 sample in 5 holds one
                chunk[min(position + rng.randrange(2_000), len(chunk) - 1)] = "Wait,"
            words.extend(chunk)
            size += sum(map(len, chunk)) + len(chunk)
        prose = " ".join(words)
        assert RARE not in prose.lower()
        return cls(prose)

    def take(self, rng: random.Random, chars: int) -> str:
        start = self.text.find(" ", rng.randrange(len(self.text) - chars - 100)) + 1
        return self.text[start : start + chars]


def step_samples(
    rng: random.Random,
    pool: Pool,
    step: int,
    per_step: int,
    chars: int,
    rare: set[tuple[int, int]] | None = None,
) -> list[dict[str, Any]]:
    """One step's samples as `build_sample` makes them (what the callback writes)."""
    prompt_chars = chars // 4
    completion_chars = chars - prompt_chars
    timestamp = 1_704_672_000.0 + step * 30.0
    samples = []
    for first in range(0, per_step, GROUP):
        prompt = f"Problem {step}.{first // GROUP}: " + pool.take(
            rng, int(prompt_chars * rng.uniform(0.7, 1.3))
        )
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        truth = str(rng.randrange(1_000))
        for index in range(first, min(first + GROUP, per_step)):
            scale = rng.uniform(0.4, 1.6)
            completion = pool.take(rng, int(completion_chars * scale))
            if rare is not None and (step, index) in rare:
                middle = len(completion) // 2
                completion = f"{completion[:middle]} Zanzibar {completion[middle:]}"
            accuracy = float(rng.random() < 0.4)
            fmt = rng.choice((0.0, 0.5, 1.0))
            samples.append(
                build_sample(
                    step,
                    index,
                    prompt,
                    completion,
                    reward=accuracy + 0.1 * fmt,
                    rewards={"accuracy": accuracy, "format": fmt},
                    group=uid,
                    response_length=len(completion) // 4,
                    finish_reason="length" if scale > 1.5 else "stop",
                    extra={"data_source": "openai/gsm8k", "ground_truth": truth},
                    timestamp=timestamp,
                )
            )
    return samples


def digest(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


class Rows:
    """Pre-built `samples` and `sample_prompts` rows (the floor's input)."""

    def __init__(self) -> None:
        self.prompt_ids: dict[str, int] = {}
        self.prompts: list[tuple[Any, ...]] = []
        self.samples: list[tuple[Any, ...]] = []

    def add(self, sample: dict[str, Any]) -> None:
        prompt = sample["prompt"]
        key = digest(prompt)
        prompt_id = self.prompt_ids.get(key)
        if prompt_id is None:
            prompt_id = self.prompt_ids[key] = len(self.prompt_ids) + 1
            self.prompts.append((prompt_id, JOB, key, prompt))
        rewards, extra = sample.get("rewards"), sample.get("extra")
        completion = sample["completion"]
        self.samples.append(
            (
                JOB,
                sample["step"],
                sample["index"],
                sample.get("timestamp"),
                prompt_id,
                completion,
                sample.get("reward"),
                None,
                None if rewards is None else orjson.dumps(rewards).decode(),
                sample.get("group"),
                sample.get("response_length"),
                len(completion),
                sample.get("finish_reason"),
                None if extra is None else orjson.dumps(extra).decode(),
                time.time(),
            )
        )


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def insert_sql(table: str, columns: tuple[str, ...], marker: str) -> str:
    quoted = ", ".join(f'"{column}"' for column in columns)
    return f"INSERT INTO {table} ({quoted}) VALUES ({', '.join([marker] * len(columns))})"


def seed_job(session: Session) -> None:
    session.execute(
        text(
            "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected, created_at)"
            " VALUES (:j, 'local', false, 'pending', false, 0)"
        ),
        {"j": JOB},
    )


# --- databases --------------------------------------------------------------------------


class Loader:
    """Pre-built rows into the tables through the driver alone: the floor."""

    def insert(self, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        raise NotImplementedError

    def prompts(self, rows: Rows) -> None:
        self.insert("sample_prompts", PROMPT_COLUMNS, rows.prompts)

    def samples(self, rows: Rows) -> float:
        """Seconds to insert and commit `rows`' samples."""
        return timed(lambda: self.insert("samples", SAMPLE_COLUMNS, rows.samples))

    def close(self) -> None: ...


class SqliteLoader(Loader):
    """Stores what `StoredText` stores: each completion through `pack_text` (timed:
    the platform must compress it too), with `tp_text` on the connection for the
    text search's triggers."""

    def __init__(self, url: str) -> None:
        self.raw = sqlite3.connect(make_url(url).database or "")
        self.raw.execute("PRAGMA journal_mode=WAL")
        self.raw.execute("PRAGMA synchronous=NORMAL")
        register_sqlite_functions(self.raw)

    def insert(self, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        if table == "samples":
            at = columns.index("completion")
            rows = [(*row[:at], pack_text(row[at]), *row[at + 1 :]) for row in rows]
        with self.raw:  # one transaction, committed
            self.raw.executemany(insert_sql(table, columns, "?"), rows)

    def close(self) -> None:
        self.raw.close()


class CopyLoader(Loader):
    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)
        self.connection = self.engine.raw_connection()
        self.driver: Any = self.connection.driver_connection

    def insert(self, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        quoted = ", ".join(f'"{column}"' for column in columns)
        with (
            self.driver.cursor() as cursor,
            cursor.copy(f"COPY {table} ({quoted}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
        self.driver.commit()

    def close(self) -> None:
        self.connection.close()
        self.engine.dispose()


@dataclass
class Backend:
    """Fresh databases of one kind, and the raw driver path into them."""

    name: str
    work: Path
    admin: Engine | None = None
    created: list[str] = field(default_factory=list)

    @property
    def postgres(self) -> bool:
        return self.name == "postgresql"

    def new_url(self, label: str) -> str:
        if not self.postgres:
            return f"sqlite:///{self.work / f'{label}.db'}"
        assert self.admin is not None
        name = f"tp_bench_samples_{uuid.uuid4().hex[:8]}"
        with self.admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        return make_url(POSTGRES_URL).set(database=name).render_as_string(False)

    def drop_all(self) -> None:
        if self.admin is None:
            return
        with self.admin.connect() as connection:
            for name in self.created:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()

    def factory(self, url: str) -> sessionmaker[Session]:
        engine = make_engine(url)
        prepare_schema(engine, auto_migrate=True)
        return make_session_factory(engine)

    def loader(self, url: str) -> Loader:
        """The raw driver path into `url`, with the job seeded (untimed)."""
        factory = self.factory(url)
        with factory.begin() as session:
            seed_job(session)
        factory.kw["bind"].dispose()
        if self.postgres:
            return CopyLoader(url)
        return SqliteLoader(url)

    def stored_bytes(self, url: str) -> tuple[int, str]:
        """The samples' bytes on disk, and what was measured."""
        if self.postgres:
            engine = create_engine(url)
            with engine.connect() as connection:
                size = connection.execute(
                    text(
                        "SELECT pg_total_relation_size('samples')"
                        " + pg_total_relation_size('sample_prompts')"
                        " + coalesce(pg_total_relation_size(to_regclass('sample_words')), 0)"
                    )
                ).scalar_one()
            engine.dispose()
            return int(size), "pg_total_relation_size(samples + sample_prompts + sample_words)"
        path = make_url(url).database or ""
        raw = sqlite3.connect(path)
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw.close()
        return os.path.getsize(path), "the database file after a WAL checkpoint"


# --- 1. and 2.: ingestion and disk ------------------------------------------------------


def write_samples_file(
    path: Path, rng: random.Random, pool: Pool, steps: int, per_step: int, chars: int
) -> int:
    with path.open("wb") as handle:
        for step in range(steps):
            samples = step_samples(rng, pool, step, per_step, chars)
            handle.write(b"".join(encode_record(sample) for sample in samples))
    return steps * per_step


def write_metrics_file(path: Path, size: int) -> int:
    """Realistic metrics lines (bench_ingest.py's) until the file holds `size` bytes."""
    lines = 0
    written = 0
    with path.open("wb") as handle:
        while written < size:
            block = b"".join(realistic_line(step) for step in range(lines, lines + 1_000))
            handle.write(block)
            written += len(block)
            lines += 1_000
    return lines


def floor_rows(path: Path) -> Rows:
    rows = Rows()
    with path.open("rb") as handle:
        for line in handle:
            rows.add(decode_sample_line(line[:-1]))
    return rows


def our_sync(factory: sessionmaker[Session], directory: Path, kind: str) -> tuple[float, int]:
    """Seconds for one end-to-end sync of the whole file, and the records it stored."""
    with factory.begin() as session:
        discover_jobs(session, directory)
    reader = LocalMetricsReader(JOB, directory)
    try:
        start = time.perf_counter()
        if kind == "samples":
            result = sync_file(factory, JOB, reader, SAMPLES)
        else:
            result = sync_metrics_from_file(factory, JOB, reader)
        return time.perf_counter() - start, result.new_metrics
    finally:
        reader.close()


def bench_ingestion(
    backend: Backend,
    samples_dir: Path,
    metrics_dir: Path,
    counts: tuple[int, int],
    rounds: int,
) -> None:
    samples, records = counts
    samples_bytes = (samples_dir / f"{JOB}{SAMPLES.suffix}").stat().st_size
    metrics_bytes = (metrics_dir / f"{JOB}_metrics.jsonl").stat().st_size
    rows = floor_rows(samples_dir / f"{JOB}{SAMPLES.suffix}")
    floor_name = "psycopg COPY" if backend.postgres else "sqlite3 executemany"
    times: dict[str, list[float]] = {"ours": [], "metrics": [], "floor": []}
    last_ours = ""
    for round_ in range(rounds):  # interleaved: all three see the same machine
        url = backend.new_url(f"ours{round_}")
        factory = backend.factory(url)
        seconds, stored = our_sync(factory, samples_dir, "samples")
        factory.kw["bind"].dispose()
        assert stored == samples, (stored, samples)
        times["ours"].append(seconds)
        last_ours = url

        factory = backend.factory(backend.new_url(f"metrics{round_}"))
        seconds, stored = our_sync(factory, metrics_dir, "metrics")
        factory.kw["bind"].dispose()
        assert stored == records, (stored, records)
        times["metrics"].append(seconds)

        loader = backend.loader(backend.new_url(f"floor{round_}"))
        loader.prompts(rows)  # not timed: the floor is the samples' rows alone
        times["floor"].append(loader.samples(rows))
        loader.close()
    best = {label: min(values) for label, values in times.items()}
    floor = best["floor"]
    mb = samples_bytes / 1e6
    print(
        f"\n{backend.name}: ingestion of {samples:,} samples ({mb:.1f} MB of JSONL),"
        f" best of {rounds} interleaved rounds, a fresh database each"
    )
    print(f"  {'':<52} {'MB/s':>7} {'samples/s':>10} {'x floor':>8}")
    line = "  {:<52} {:>7.1f} {:>10,.0f} {:>8.2f}"
    print(line.format("ours: samples JSONL -> sync_file(SAMPLES)", mb / best["ours"],
                      samples / best["ours"], best["ours"] / floor))  # fmt: skip
    print(line.format(f"raw {floor_name}, pre-built rows (floor)", mb / floor,
                      samples / floor, 1.0))  # fmt: skip
    print(
        f"  {'metrics path, same bytes: sync_metrics_from_file':<52}"
        f" {metrics_bytes / 1e6 / best['metrics']:>7.1f}"
        f" {records / best['metrics']:>10,.0f} rec/s ({records:,} records)"
    )
    ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(times["ours"], times["floor"], strict=True))
    print(f"  per-round ours/floor: {ratios}")
    per_mb = ", ".join(f"{a / b:.2f}" for a, b in zip(times["ours"], times["metrics"], strict=True))
    print(f"  per-round ours/metrics (same bytes; < 1: samples ingest faster per MB): {per_mb}")

    stored, what = backend.stored_bytes(last_ours)
    print(
        f"  disk: {stored / 1e6:.1f} MB ({what}) for {mb:.1f} MB of JSONL:"
        f" {stored / samples_bytes:.2f}x the file, {stored / samples:,.0f} bytes/sample"
    )


# --- 3. and 4.: serving one step, text search -------------------------------------------


def build_search_database(
    backend: Backend, rng: random.Random, pool: Pool, count: int, per_step: int, chars: int
) -> tuple[str, int, dict[str, int]]:
    """`count` samples loaded with the raw path; the URL, the steps, each word's samples."""
    steps = max(1, count // per_step)
    rare = {(rng.randrange(steps), rng.randrange(per_step)) for _ in range(RARE_HITS)}
    url = backend.new_url("search")
    loader = backend.loader(url)
    hits = {RARE: 0, COMMON: 0}
    rows = Rows()
    start = time.perf_counter()
    for first in range(0, steps, 16):
        for step in range(first, min(first + 16, steps)):
            for sample in step_samples(rng, pool, step, per_step, chars, rare):
                rows.add(sample)
                for word in hits:
                    completion, prompt = sample["completion"].lower(), sample["prompt"].lower()
                    hits[word] += word in completion or word in prompt
        loader.prompts(rows)
        loader.samples(rows)
        rows.prompts.clear()
        rows.samples.clear()
    loader.close()
    seconds = time.perf_counter() - start
    if backend.postgres:  # what autovacuum would soon do after such a load
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.execute(text("ANALYZE samples"))
            connection.execute(text("ANALYZE sample_prompts"))
        engine.dispose()
    stored, what = backend.stored_bytes(url)
    total = steps * per_step
    print(
        f"\n{backend.name}: {total:,} samples ({steps:,} steps of {per_step}) loaded through"
        f" the raw path in {seconds:.0f} s for serving and search;"
        f" {stored / 1e6:,.0f} MB ({what}), {stored / total:,.0f} bytes/sample"
    )
    return url, steps, hits


def verdict(p95: float, target: float) -> str:
    return f"target <= {target:.0f} ms: {'MET' if p95 <= target else 'NOT MET'}"


def bench_serving(
    url: str, steps: int, per_step: int, requests: int, metrics_dir: Path, rng: random.Random
) -> None:
    engine = make_engine(url)
    factory = make_session_factory(engine)

    def page(step: int) -> None:
        with factory() as session:
            got = sample_page(session, job_id=JOB, where=SampleFilter(step=step), limit=per_step)
        assert len(got.samples) == per_step, len(got.samples)

    direct: list[float] = []
    http: list[float] = []
    settings = Settings(
        database_url=url,
        metrics_dir=metrics_dir,
        api_token=None,
        poll_interval=0,  # no background sync: the database is the subject
        watch_files=False,
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:

        def get(step: int) -> None:
            response = client.get(
                f"/api/monitoring/{JOB}/samples", params={"step": step, "limit": per_step}
            )
            assert response.status_code == 200, response.text
            http_bytes.append(len(response.content))

        http_bytes: list[int] = []
        for step in (0, steps - 1, steps // 2):  # warm up both paths
            page(step)
            get(step)
        for _ in range(requests):  # interleaved, random steps
            direct.append(timed(partial(page, rng.randrange(steps))) * 1000)
            http.append(timed(partial(get, rng.randrange(steps))) * 1000)
    engine.dispose()
    size = statistics.mean(http_bytes) / 1e6
    print(f"  one step's {per_step} samples, {requests} requests on random steps (ms):")
    for label, values in (("sample_page(step=N)", direct), ("GET .../samples?step=N", http)):
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"    {label:<26} p50 {p50:7.1f}  p95 {p95:7.1f}   {verdict(p95, SERVE_TARGET_MS)}")
    print(f"    (the HTTP answer: {size:.2f} MB of JSON)")


def bench_search(url: str, queries: int, hits: dict[str, int], total: int) -> None:
    engine = make_engine(url)
    factory = make_session_factory(engine)
    times: dict[str, list[float]] = {word: [] for word in hits}
    returned: dict[str, int] = {}

    def search(word: str) -> None:
        with factory() as session:
            got = sample_page(session, job_id=JOB, where=SampleFilter(q=word), limit=100)
        returned[word] = len(got.samples)

    for word in hits:  # warm up
        search(word)
    for _ in range(queries):  # interleaved
        for word in hits:
            times[word].append(timed(partial(search, word)) * 1000)
    engine.dispose()
    print(f"  text search q=..., limit 100, over {total:,} samples, {queries} queries each (ms):")
    for word, values in times.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        kind = "rare" if word == RARE else "common"
        label = f"{kind} {word!r} (in {hits[word]:,} samples; page of {returned[word]})"
        print(f"    {label:<46} p50 {p50:7.0f}  p95 {p95:7.0f}   {verdict(p95, SEARCH_TARGET_MS)}")


# --- main -------------------------------------------------------------------------------


def backends(names: list[str], work: Path) -> Iterator[Backend]:
    for name in names:
        if name == "sqlite":
            yield Backend(name, work)
            continue
        admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            print(f"\nPostgreSQL skipped: not reachable at {POSTGRES_URL} ({type(exc).__name__})")
            admin.dispose()
            continue
        yield Backend(name, work, admin)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="steps in the ingested file")
    parser.add_argument("--samples-per-step", type=int, default=256)
    parser.add_argument("--chars", type=int, default=2_000, help="~characters per sample")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best kept")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--search-samples", type=int, default=256 * 1024)
    parser.add_argument("--requests", type=int, default=50, help="serving requests per path")
    parser.add_argument("--queries", type=int, default=10, help="search queries per word")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--quick", action="store_true", help="development: 8 steps, 2 rounds, 16k samples searched"
    )
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds, args.requests, args.queries = 8, 2, 20, 3
        args.search_samples = min(args.search_samples, 16 * 1024)
    rng = random.Random(args.seed)
    pool = Pool.make(rng)
    per_step = args.samples_per_step
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tp-bench-samples-") as tmp:
        work = Path(tmp)
        samples_dir, metrics_dir, empty_dir = work / "samples", work / "metrics", work / "empty"
        for directory in (samples_dir, metrics_dir, empty_dir):
            directory.mkdir()
        (samples_dir / f"{JOB}_metrics.jsonl").write_bytes(b"")  # the job, discovered
        samples_path = samples_dir / f"{JOB}{SAMPLES.suffix}"
        count = write_samples_file(samples_path, rng, pool, args.steps, per_step, args.chars)
        size = samples_path.stat().st_size
        records = write_metrics_file(metrics_dir / f"{JOB}_metrics.jsonl", size)
        print(
            f"{count:,} samples ({args.steps} steps x {per_step}, ~{args.chars} chars,"
            f" groups of {GROUP}): {size / 1e6:.1f} MB of JSONL, {size / count:,.0f} bytes/line;"
            f" metrics file of the same size: {records:,} lines"
        )
        for backend in backends(args.backends.split(","), work):
            try:
                bench_ingestion(backend, samples_dir, metrics_dir, (count, records), args.rounds)
                if args.search_samples > 0:
                    url, steps, hits = build_search_database(
                        backend, rng, pool, args.search_samples, per_step, args.chars
                    )
                    bench_serving(url, steps, per_step, args.requests, empty_dir, rng)
                    bench_search(url, args.queries, hits, steps * per_step)
            finally:
                backend.drop_all()
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
