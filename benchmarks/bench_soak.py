"""The soak of tests/soak for a chosen duration, printing its figures (docs/benchmarks.md).

    .venv/bin/python benchmarks/bench_soak.py --seconds 600            # SQLite
    .venv/bin/python benchmarks/bench_soak.py --database-url postgresql+psycopg://...

The same load and the same server as tests/soak/test_soak.py; this only
prints, the test asserts. Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.soak.soak_run import run_soak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=100.0, help="Soak duration.")
    parser.add_argument(
        "--database-url",
        default=None,
        help="An empty database to use; default: a fresh SQLite file in a temp dir.",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as temp:
        workdir = Path(temp)
        url = args.database_url or f"sqlite:///{workdir / 'soak.db'}"
        print(run_soak(url, workdir, args.seconds).report())


if __name__ == "__main__":
    main()
