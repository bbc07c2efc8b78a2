"""The design documents' `python scripts/migrate_db_phase1_2.py`, kept for their readers.

The schema is Alembic's now, one migration tree for SQLite and PostgreSQL, and
`training-platform migrate` brings any database to the newest revision (a
no-op when current). This script is that command, with its options
(`--database-url`, else `DATABASE_URL`):

    python scripts/migrate_db_phase1_2.py --database-url sqlite:///./training_platform.db
"""

from __future__ import annotations

import sys

from training_platform.entry import main

if __name__ == "__main__":
    print(
        "migrate_db_phase1_2.py: running `training-platform migrate`, which replaces it",
        file=sys.stderr,
    )
    sys.argv = [sys.argv[0], "migrate", *sys.argv[1:]]
    main()
