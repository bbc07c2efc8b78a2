"""Find the complete JSONL lines after a byte position, in bounded memory and work.

The pure part of the metrics readers: no I/O of its own, only a
``read_at(offset, size)`` callable, so the local reader (``os.pread``) and the
SSH reader (pipelined SFTP reads) share every rule about lines:

- only lines ending in ``b"\\n"`` count; the partial last line is held back
  (the writer has not finished it) and read again once it is complete;
- a file is identified by a fingerprint of its first bytes (up to 1 KiB), not
  by its inode, which SFTP does not show and a copy or restore changes: a
  truncated or replaced file is read again from byte 0. A replacement whose
  first KiB is byte-for-byte the same and that is already longer than our
  offset cannot be told apart (records carry timestamps, so in practice the
  first line differs);
- a line longer than ``max_line_bytes`` is skipped without ever being held
  whole, even while it is still being written;
- a bad line (malformed JSON, invalid UTF-8, not a record) is counted and
  skipped; blank lines are skipped silently; CRLF and a BOM are accepted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from training_platform.callbacks.wire.lines import decode_line

FINGERPRINT_BYTES: Final = 1024
CHUNK_BYTES: Final = 1 << 20
MAX_ERRORS: Final = 5

ReadAt = Callable[[int, int], bytes]
# One line (without its b"\n") -> its record; raises on a bad line.
Decode = Callable[[bytes], dict[str, Any]]


@dataclass(frozen=True)
class ReadPosition:
    """Where the next read starts; commit it only with the records read before it."""

    offset: int = 0  # first unread byte; a line start unless `discarding`
    fingerprint: str | None = None  # "<n>:<sha256 hex of the file's first n bytes>"
    discarding: bool = False  # inside an over-long line: skip up to its next b"\n"


@dataclass
class ReadBatch:
    records: list[dict[str, Any]]  # the decoded lines, in file order
    position: ReadPosition  # where the next read starts
    malformed: int = 0  # lines skipped: invalid JSON, invalid UTF-8, not a record
    oversized: int = 0  # lines skipped for exceeding max_line_bytes
    reset: bool = False  # file truncated or replaced: this batch was read from byte 0
    at_eof: bool = True  # False when max_bytes cut the read short (call again)
    file_size: int = 0
    errors: list[str] = field(default_factory=list)  # first few "line at byte N: ..."
    # What another tool's files say of the run, when they say it: its "config"
    # (hparams, params), "name", "project", "tags" (`ingest/run_file.py`,
    # `store_run_about`); stored with the records, in the same transaction.
    about: dict[str, Any] | None = None

    @property
    def new_offset(self) -> int:
        return self.position.offset


def fingerprint(head: bytes) -> str:
    return f"{len(head)}:{hashlib.sha256(head).hexdigest()}"


def same_file(stored: str, head: bytes) -> bool:
    """Does `head` (the file's first bytes now) still start with what `stored` saw?

    The stored length may be shorter than `head` (the file was small when first
    seen and has grown since): only those first bytes are compared.
    """
    length, _, digest = stored.partition(":")
    if not length.isdigit() or int(length) > len(head):
        return False  # unparsable, or the file is now shorter than what we saw
    return hashlib.sha256(head[: int(length)]).hexdigest() == digest


class _Scan:
    """State of one `scan_lines` call; methods keep the hot loop readable."""

    def __init__(self, max_line_bytes: int, decode: Decode) -> None:
        self.max_line_bytes = max_line_bytes
        self.decode = decode
        self.records: list[dict[str, Any]] = []
        self.malformed = 0
        self.oversized = 0
        self.errors: list[str] = []

    def note(self, offset: int, reason: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"line at byte {offset}: {reason[:200]}")

    def too_long(self, offset: int, length: int) -> None:
        self.oversized += 1
        self.note(offset, f"longer than {self.max_line_bytes} bytes ({length}+), skipped")

    def lines(self, lines: list[bytes], offset: int) -> None:
        """Decode complete lines (without their b"\\n") starting at byte `offset`."""
        append = self.records.append
        decode = self.decode
        limit = self.max_line_bytes
        for line in lines:
            if len(line) > limit:
                self.too_long(offset, len(line))
            else:
                try:
                    append(decode(line))
                except Exception as exc:
                    # Any bad line (RecordError, or a bug in a normalizer) is
                    # counted and skipped: it must never block the lines after it.
                    if line.strip():  # blank lines are skipped silently
                        self.malformed += 1
                        self.note(offset, str(exc) or type(exc).__name__)
            offset += len(line) + 1


def start_of(read_at: ReadAt, size: int, position: ReadPosition) -> tuple[bytes, int, bool]:
    """The file's first bytes (its fingerprint's), and where a read starts: at
    `position`, or at 0 with ``reset`` when the file is now shorter than that or its
    first bytes changed (truncated, or replaced). For the framed files of other
    tools; `scan_lines` also minds an over-long line it was inside."""
    head = read_at(0, min(size, FINGERPRINT_BYTES)) if size else b""
    stale = position.fingerprint is not None and not same_file(position.fingerprint, head)
    if stale or position.offset > size:
        return head, 0, True
    return head, position.offset, False


def scan_lines(
    read_at: ReadAt,
    size: int,
    position: ReadPosition,
    *,
    max_line_bytes: int,
    max_bytes: int,
    chunk_bytes: int = CHUNK_BYTES,
    decode: Decode = decode_line,
) -> ReadBatch:
    """Read the complete lines of a file after `position`, up to `size` bytes.

    `read_at(offset, n)` returns up to `n` bytes of the file at `offset` (fewer
    only at end of file). Memory stays bounded by about `max_line_bytes` +
    `chunk_bytes` whatever the line lengths; work by about `max_bytes`, except
    that a call always advances past at least one line (or skipped bytes), so
    a caller looping on ``at_eof`` always terminates.
    """
    head = read_at(0, min(size, FINGERPRINT_BYTES)) if size else b""
    offset, discarding, reset = position.offset, position.discarding, False
    stale = position.fingerprint is not None and not same_file(position.fingerprint, head)
    if stale or offset > size:  # replaced, or truncated (also while nobody was reading)
        offset, discarding, reset = 0, False, True
    scan = _Scan(max_line_bytes, decode)
    chunk_bytes = max(1, min(chunk_bytes, max_bytes))
    start, start_discarding, pos, consumed = offset, discarding, offset, 0
    line_start = offset  # file offset of the held-back partial line (when not discarding)
    pending: list[bytes] = []  # pieces of that partial line, at most ~max_line_bytes
    pending_len = 0
    shrunk = False
    while pos < size:
        committed = pos if discarding else line_start
        if consumed >= max_bytes and (committed != start or discarding != start_discarding):
            break
        data = read_at(pos, min(chunk_bytes, size - pos))
        if not data:
            shrunk = True  # truncated under us; the next call sees it and resets
            break
        data_start = pos
        pos += len(data)
        consumed += len(data)
        if discarding:
            newline = data.find(b"\n")
            if newline < 0:
                continue  # still inside the over-long line
            discarding = False
            data = data[newline + 1 :]
            data_start = line_start = pos - len(data)
        if pending:
            newline = data.find(b"\n")
            if newline < 0:
                pending.append(data)
                pending_len += len(data)
                if pending_len > max_line_bytes:
                    # Stop buffering: skip the rest of this line as it arrives.
                    scan.too_long(line_start, pending_len)
                    pending, pending_len, discarding = [], 0, True
                continue
            pending.append(data[:newline])
            scan.lines([b"".join(pending)], line_start)
            pending, pending_len = [], 0
            data = data[newline + 1 :]
            data_start = line_start = pos - len(data)
        lines = data.split(b"\n")
        rest = lines.pop()  # after the last b"\n": a line still being written
        scan.lines(lines, data_start)
        line_start = pos - len(rest)
        if len(rest) > max_line_bytes:
            scan.too_long(line_start, len(rest))
            discarding = True
        elif rest:
            # Held back, not parsed: the writer has not finished this line yet.
            pending, pending_len = [rest], len(rest)
    return ReadBatch(
        records=scan.records,
        position=ReadPosition(pos if discarding else line_start, fingerprint(head), discarding),
        malformed=scan.malformed,
        oversized=scan.oversized,
        reset=reset,
        at_eof=pos >= size or shrunk,
        file_size=size,
        errors=scan.errors,
    )
