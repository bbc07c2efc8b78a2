"""TFRecord framing, read incrementally by byte offset: how TensorBoard event files
are laid out (docs/contract.md, "Runs logged by other tools").

A record is ``length (u64 LE) | masked CRC-32C of length (u32) | data |
masked CRC-32C of data (u32)``. Read from a committed byte offset, a record is:

- **complete and intact**: returned, and the offset moves past it;
- **incomplete at the end of what was read** (a writer mid-flush): held back,
  the offset stays before it, so the next read starts there again;
- **corrupt data** (its header is intact, so its length is known): skipped
  and counted with its reason, the offset moves past it;
- **a corrupt header** (its length cannot be trusted): the bytes are searched
  for the next offset where a record's header checks out, the skipped bytes
  counted as one corrupt record.

Checksums are Google's CRC-32C (`google-crc32c`, its C implementation): the
pure-Python one TensorBoard falls back to without TensorFlow reads about a
megabyte a second.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import google_crc32c

HEADER: Final = 12  # length (8) and its checksum (4)
FOOTER: Final = 4  # the data's checksum
_MASK_DELTA: Final = 0xA282EAD8
MAX_RECORD_BYTES: Final = 64 << 20
"""A record claiming more is treated as a corrupt header (no event is that large)."""

ReadAt = Callable[[int, int], bytes]  # (offset, size) -> at most size bytes from offset


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    crc = int(google_crc32c.value(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """`data` as one record (what a writer appends; tests build files with it)."""
    length = struct.pack("<Q", len(data))
    return (
        length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))
    )


@dataclass
class RecordBatch:
    records: list[bytes]
    offset: int  # where the next read starts: after the last whole record read
    at_eof: bool  # nothing complete is left after `offset` (in the bytes that existed)
    corrupt: list[str] = field(default_factory=list)  # "offset N: why", one per skip


def read_records(read_at: ReadAt, size: int, offset: int, max_bytes: int) -> RecordBatch:
    """The whole records of a file of `size` bytes from `offset`, about `max_bytes` of
    them (a first record larger than that is still read whole)."""
    batch = RecordBatch(records=[], offset=offset, at_eof=True)
    base = offset
    buffer = read_at(base, min(size, base + max(max_bytes, HEADER)) - base)
    position = 0
    while base + position < size:
        available = len(buffer) - position
        if available < HEADER:
            if base + position + HEADER > size:
                break  # a header half written: held back
            batch.at_eof = False
            break
        head = buffer[position : position + 8]
        (length,) = struct.unpack_from("<Q", head)
        header_ok = length <= MAX_RECORD_BYTES and (
            struct.unpack_from("<I", buffer, position + 8)[0] == masked_crc(head)
        )
        if not header_ok:
            found = _next_header(buffer, position + 1)
            if found is None:
                # Nothing checks out in what was read: skip it all but a header's
                # worth (the start of the next good header may straddle the end).
                found = max(position + 1, len(buffer) - HEADER + 1)
            batch.corrupt.append(
                f"offset {base + position}: bad record header, {found - position} bytes skipped"
            )
            position = found
            batch.offset = base + position
            continue
        whole = HEADER + length + FOOTER
        if available < whole:
            if base + position + whole > size:
                break  # a record half written: held back until its writer finishes it
            if batch.records or batch.corrupt:
                batch.at_eof = False  # the next read starts at this record
                break
            buffer = read_at(base + position, whole)  # one record past max_bytes
            base, position = base + position, 0
            continue
        data = buffer[position + HEADER : position + HEADER + length]
        (data_crc,) = struct.unpack_from("<I", buffer, position + HEADER + length)
        if data_crc == masked_crc(data):
            batch.records.append(data)
        else:
            batch.corrupt.append(f"offset {base + position}: bad record data checksum")
        position += whole
        batch.offset = base + position
    return batch


def _next_header(buffer: bytes, start: int) -> int | None:
    """The first offset at or after `start` where a record header checks out."""
    for position in range(start, len(buffer) - HEADER + 1):
        head = buffer[position : position + 8]
        (length,) = struct.unpack_from("<Q", head)
        if length > MAX_RECORD_BYTES:
            continue
        if struct.unpack_from("<I", buffer, position + 8)[0] == masked_crc(head):
            return position
    return None
