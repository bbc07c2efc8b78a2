"""``training-platform sysmon JOB_ID``: sample a node that runs no callback (docs/trainer.md).

verl's Ray workers on the other hosts of a multi-node run have no
`PlatformCallback`; this command samples their host into
``{job_id}_system.{host}.jsonl`` (one file per host, wire/system_file.py) in
the job's directory. It needs the trainer-side install only (argparse, no
typer): `entry.py` hands it the arguments before the typer CLI is imported.
SIGINT and SIGTERM stop it after the line it is writing.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from training_platform.callbacks.system.sampler import SystemSampler
from training_platform.callbacks.wire.locations import default_output_dir, ensure_metrics_dir
from training_platform.callbacks.wire.schema import validate_job_id
from training_platform.callbacks.wire.system_file import system_file_name
from training_platform.errors import PlatformError


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="training-platform sysmon",
        description="Sample this host's CPU, memory, disk, network and GPUs into "
        "{job_id}_system.{host}.jsonl until SIGINT or SIGTERM (for the nodes of a "
        "multi-node run that run no PlatformCallback).",
    )
    parse.add_argument("job_id", metavar="JOB_ID", help="the run's job id")
    parse.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="the job's metrics directory (default: $PLATFORM_METRICS_DIR, else the "
        "user's data directory, as the callback's)",
    )
    parse.add_argument(
        "--interval", type=float, default=10.0, help="seconds between samples (default 10)"
    )
    parse.add_argument(
        "--host", default=None, help="this host's name in the lines and the file name "
        "(default: the machine's name)",
    )  # fmt: skip
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        job_id = validate_job_id(args.job_id)
        if not args.interval > 0 or args.interval == float("inf"):
            raise ValueError(
                f"--interval must be a positive number of seconds, got {args.interval}"
            )
        directory = ensure_metrics_dir(args.output_dir or default_output_dir())
    except (PlatformError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host = args.host if args.host is not None else socket.gethostname()
    path = directory / system_file_name(job_id, host)
    sampler = SystemSampler(path, args.interval, host=host, name="sysmon")

    def stop(signum: int, frame: FrameType | None) -> None:
        sampler.request_stop()  # the loop finishes the line it is writing, then returns

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(
        f"sysmon: sampling {host} every {args.interval:g}s into {path}", file=sys.stderr, flush=True
    )
    sampler.run()
    print(f"sysmon: stopped after {sampler.samples_written} samples", file=sys.stderr, flush=True)
    return 0
