"""The soak's load: writers good and hostile, stalled and live clients, an artifact swapper.

Every loop here runs until `stop` is set or its own deadline passes, whichever
comes first, and every network call has a timeout: a stuck server fails the
soak's checks, it never hangs the test.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from tests.api.live_support import open_ws, record_line
from tests.api.test_slow_clients import stalled_client

GOOD_JOBS = ("good0", "good1", "good2")
HOSTILE_JOB = "hostile"
REWRITTEN_JOB = "rewritten"
SWAPPED_JOB = "swapped"
SECRET = b"TOP-SECRET-outside-the-metrics-dir-7f3a"
PROBED = ("/healthz", "/api/jobs", "/api/monitoring/good0/metrics?max_points=500")
BAD_LINE_STEP = 1_000_000  # bad lines that parse name steps from here up, never a good one's
BAD_LINES: tuple[bytes, ...] = (
    b'{"step": 12, "timestamp": \n',  # malformed JSON
    b'{"step": 1000000, "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n",  # deep nesting
    b'{"step": 1000001, "timestamp": 1.0, "extra": {"s": "\\udc00"}}\n',  # lone surrogate
    b'{"step": 1000002, "timestamp": 1.0, "extra": {"s": "a\x00b"}}\n',  # a raw NUL
    b'{"step": 1000003\x00, "timestamp": 1.0}\n',
    b'{"step": ' + b"9" * 5_000 + b', "timestamp": 1.0}\n',  # a huge int
    b'{"step": 1000004, "timestamp": 1.0, "extra": {"x": ' + b"9" * 400 + b"}}\n",
    b"\xff\xfe not utf-8 \n",
)
# Over PLATFORM_MAX_LINE_BYTES (1 MiB): written every LONG_EVERY steps only, to spare the disk.
LONG_LINE = b'{"step": 1000005, "pad": "' + b"x" * (1 << 20) + b'"}\n'
LONG_EVERY = 100


@dataclass
class Tally:
    """What the load saw; shared by its threads, appended under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    written: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    server_errors: list[str] = field(default_factory=list)
    leaks: int = 0
    downloads: int = 0
    served: int = 0  # downloads answered 200: the regular file, caught between swaps
    stalled_connects: int = 0
    live_messages: int = 0
    bad_lines: int = 0
    rewrites: int = 0

    def error(self, what: str) -> None:
        with self.lock:
            self.server_errors.append(what)


def write_status(directory: Path, job_id: str, status: str, step: int) -> None:
    """Atomically, the way the callback writes it."""
    body = {
        "job_id": job_id,
        "status": status,
        "current_step": step,
        "total_steps": None,
        "anomaly_detected": False,
        "anomaly_reason": None,
        "started_at": 1.0,
        "updated_at": time.time(),
    }
    spare = directory / f".{job_id}_status.json.tmp"
    spare.write_text(json.dumps(body))
    os.replace(spare, directory / f"{job_id}_status.json")


def good_writer(directory: Path, job_id: str, tally: Tally, stop: threading.Event) -> None:
    """~50 valid lines a second, a status file every second."""
    path = directory / f"{job_id}_metrics.jsonl"
    step = 0
    with path.open("ab", buffering=0) as handle:
        while not stop.wait(0.02):
            handle.write(record_line(step))
            with tally.lock:
                tally.written[job_id].append(step)
            if step % 50 == 0:
                write_status(directory, job_id, "running", step)
            step += 1
    write_status(directory, job_id, "completed", step - 1)


def hostile_writer(directory: Path, tally: Tally, stop: threading.Event) -> None:
    """Good lines of its own job with every kind of bad line between them."""
    path = directory / f"{HOSTILE_JOB}_metrics.jsonl"
    step = 0
    with path.open("ab", buffering=0) as handle:
        while not stop.wait(0.05):
            handle.write(record_line(step))
            with tally.lock:
                tally.written[HOSTILE_JOB].append(step)
            handle.write(BAD_LINES[step % len(BAD_LINES)])
            if step % LONG_EVERY == LONG_EVERY - 1:
                handle.write(LONG_LINE)
            with tally.lock:
                tally.bad_lines += 1
            step += 1


def rewriting_writer(directory: Path, tally: Tally, stop: threading.Event) -> None:
    """Appends, and every ~3 s truncates its file or replaces it with a shorter one."""
    path = directory / f"{REWRITTEN_JOB}_metrics.jsonl"
    step = 0
    while not stop.wait(0.05):
        if step and step % 60 == 0:
            if (step // 60) % 2:
                path.write_bytes(b"")  # truncated in place
            else:
                spare = path.with_suffix(".spare")
                spare.write_bytes(b"".join(record_line(s) for s in range(5)))
                os.replace(spare, path)  # a new, shorter file
            with tally.lock:
                tally.rewrites += 1
        with path.open("ab") as handle:
            handle.write(record_line(step))
        step += 1


def stalled_reader(port: int, tally: Tally, stop: threading.Event) -> None:
    """A live client that never reads; reconnects as soon as the server drops it."""
    path = f"/api/monitoring/{GOOD_JOBS[0]}/live?since_step=0"
    while not stop.is_set():
        try:
            sock = stalled_client(port, path)
        except (OSError, AssertionError):
            stop.wait(0.5)  # refused or dropped during the handshake: try again
            continue
        with tally.lock:
            tally.stalled_connects += 1
        poller = select.poll()
        poller.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        try:
            # Hung up (FIN or RST) shows without reading a byte of the buffer.
            while not stop.is_set() and not poller.poll(200):
                pass
        finally:
            sock.close()


def live_reader(base_ws: str, job_id: str, tally: Tally, stop: threading.Event) -> None:
    """A normal live client: reads everything, reconnects if dropped."""
    while not stop.is_set():
        try:
            with open_ws(f"{base_ws}/api/monitoring/{job_id}/live?since_step=0") as ws:
                while not stop.is_set():
                    try:
                        ws.recv(timeout=1.0)
                    except TimeoutError:
                        continue
                    with tally.lock:
                        tally.live_messages += 1
        except (ConnectionClosed, InvalidHandshake, OSError):
            stop.wait(0.5)


def artifact_swapper(directory: Path, outside: Path, stop: threading.Event) -> None:
    """`step_1/trace.json` flips between a file, a symlink out, and a FIFO."""
    target = directory / f"{SWAPPED_JOB}_profiles" / "step_1" / "trace.json"
    regular = target.with_name("trace.regular")
    spare = target.with_name("trace.spare")
    kinds = ("regular", "symlink", "regular", "fifo")
    turn = 0
    while not stop.wait(0.002):
        spare.unlink(missing_ok=True)
        kind = kinds[turn % len(kinds)]
        if kind == "regular":
            os.link(regular, spare)
        elif kind == "symlink":
            os.symlink(outside, spare)
        else:
            os.mkfifo(spare)
        os.replace(spare, target)
        turn += 1


def artifact_downloader(base: str, tally: Tally, stop: threading.Event) -> None:
    url = f"{base}/api/jobs/{SWAPPED_JOB}/artifacts/step_1/trace.json"
    with httpx.Client(timeout=10) as client:
        while not stop.wait(0.05):
            try:
                response = client.get(url)
                listing = client.get(f"{base}/api/jobs/{SWAPPED_JOB}/artifacts")
            except httpx.HTTPError:
                continue  # a timeout is the prober's business; a leak or a 5xx is ours
            for answer in (response, listing):
                if answer.status_code >= 500:
                    tally.error(f"{answer.request.url} -> {answer.status_code}")
            with tally.lock:
                tally.downloads += 1
                tally.served += response.status_code == 200
                if SECRET in response.content or SECRET in listing.content:
                    tally.leaks += 1


def api_prober(base: str, tally: Tally, stop: threading.Event) -> None:
    """Every ~200 ms, each probed route once, timed."""
    with httpx.Client(timeout=30) as client:
        while not stop.wait(0.2):
            for route in PROBED:
                started = time.monotonic()
                try:
                    status = client.get(base + route).status_code
                except httpx.HTTPError as exc:
                    tally.error(f"{route}: {exc!r}")
                    continue
                elapsed = time.monotonic() - started
                with tally.lock:
                    tally.latency[route].append(elapsed)
                if status != 200:
                    tally.error(f"{route} -> {status}")


def prepare(directory: Path, outside: Path) -> None:
    """The swapped job's metrics file and profiles folder, and the secret outside."""
    outside.write_bytes(SECRET)
    (directory / f"{SWAPPED_JOB}_metrics.jsonl").write_bytes(record_line(0))
    step_dir = directory / f"{SWAPPED_JOB}_profiles" / "step_1"
    step_dir.mkdir(parents=True)
    (step_dir / "trace.regular").write_bytes(b'{"traceEvents": []}')
    os.link(step_dir / "trace.regular", step_dir / "trace.json")


def start_load(
    directory: Path, outside: Path, port: int, tally: Tally, stop: threading.Event
) -> list[threading.Thread]:
    base = f"http://127.0.0.1:{port}"
    targets: list[tuple[object, tuple[object, ...]]] = [
        *((good_writer, (directory, job, tally, stop)) for job in GOOD_JOBS),
        (hostile_writer, (directory, tally, stop)),
        (rewriting_writer, (directory, tally, stop)),
        *((stalled_reader, (port, tally, stop)) for _ in range(3)),
        *((live_reader, (f"ws://127.0.0.1:{port}", job, tally, stop)) for job in GOOD_JOBS[1:]),
        (artifact_swapper, (directory, outside, stop)),
        (artifact_downloader, (base, tally, stop)),
        (api_prober, (base, tally, stop)),
    ]
    threads = [
        threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        for target, args in targets
    ]
    for thread in threads:
        thread.start()
    return threads
