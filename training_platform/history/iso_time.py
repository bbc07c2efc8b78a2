"""A record's Unix-seconds `timestamp` as the ISO 8601 text the WebSocket messages add.

Records keep `timestamp` as Unix seconds everywhere (the file, the database,
REST): exact, and what charts compute with. The live and playback `metric`
messages also carry `timestamp_iso`, for clients (and the design documents)
that show the time as text.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(seconds: float | None) -> str | None:
    """`2026-01-01T12:00:00.500Z`: UTC, milliseconds (truncated), `Z`; None for no
    timestamp or one no calendar holds (before year 1 or after 9999).

    About 2.5 µs: each record is serialised once per process, whatever the
    number of subscribers, so this is not worth a cache.
    """
    if seconds is None:
        return None
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds")[:-6] + "Z"  # "+00:00" -> "Z"
