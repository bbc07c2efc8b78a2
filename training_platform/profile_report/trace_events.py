"""A Chrome trace's events, decoded from a stream of chunks a batch at a time.

torch.profiler writes ``{"schemaVersion": ..., "traceEvents": [{...}, ...], ...}``;
the plain array form ``[{...}, ...]`` is read too. Only the buffer of one
chunk (plus the start of the event it cut) is held, so memory stays flat
however large the file, and reading stops at `max_bytes`.

Why batches: decoding one event at a time (`json.raw_decode`, then Python
bookkeeping per event) cost ~2 µs an event; orjson decodes every complete
event of a chunk (up to `MAX_BATCH_BYTES` of text) in one C call. The end of
the last complete event is found with ``rfind(b"},")``, and the guess is
checked by the decoder itself: ``[`` + the text up to that brace + ``]``
parses only if the brace closes a top-level event. Were the brace inside a
string, a nested object or past the end of the list, the text would leave a
string or an object open (or carry trailing text), which no JSON decoder
accepts. A failed guess is not retried: the events up to it are then decoded
one by one, each value's end found by a tokenizer that steps over strings
(the exact but slower path, which also gives the precise error messages and
the stdlib's tolerance of NaN and of bytes that are not UTF-8).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

MAX_EVENT_BYTES = 1 << 20  # one event larger than this: the trace is broken
# Text decoded per call at most (~7x that as Python objects), whatever the
# source's chunks: a source that hands over a whole file still streams.
MAX_BATCH_BYTES = 1 << 20
_SEPARATORS = re.compile(rb"[ \t\r\n,]*")
# Strings whole (escapes included), brackets, and a lone quote: a string the
# buffer ends in, whose end is in a later chunk.
_NESTING = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]"]', re.DOTALL)
_SCALAR = re.compile(rb'"(?:[^"\\]|\\.)*"|[^\s,\]\[{}"]+', re.DOTALL)
_OPENERS = frozenset(b"{[")
_QUOTE = ord('"')


class TraceError(Exception):
    """The trace cannot be read: not JSON, no events list, truncated."""


class TraceStream:
    """The events of one trace, in batches (`batches()`); how much was read, and whether all."""

    def __init__(self, chunks: Iterable[bytes], max_bytes: int) -> None:
        self.bytes_read = 0
        self.complete = True  # False: reading stopped at the byte cap
        self.events = 0
        self._chunks = iter(chunks)
        self._max_bytes = max_bytes
        self._buffer = b""
        self._base = 0  # the offset in the file of the buffer's first byte
        self._position = 0
        self._eof = False

    def batches(self) -> Iterator[list[Any]]:
        """Lists of decoded events, in file order; TraceError when the trace is broken."""
        self._open_list()
        failed_cut = -1  # (file offset) the last guess that did not parse: one by one past it
        while True:
            if self._base + self._position > failed_cut:
                match = _SEPARATORS.match(self._buffer, self._position)
                assert match is not None  # the pattern matches the empty string
                self._position = match.end()
                window = self._position + MAX_BATCH_BYTES
                cut = self._buffer.rfind(b"},", self._position, window)
                if cut >= 0:
                    try:
                        batch = orjson.loads(b"[" + self._buffer[self._position : cut + 1] + b"]")
                    except orjson.JSONDecodeError:
                        failed_cut = self._base + cut
                    else:
                        self._position = cut + 2
                        self.events += len(batch)
                        yield batch
                        continue
            event = self._next_event()
            if event is _END:
                return
            self.events += 1
            yield [event]

    def _more(self) -> bool:
        """Append the next chunk to the buffer; False at the end or at the byte cap."""
        if self._eof:
            return False
        if self.bytes_read >= self._max_bytes:
            self.complete = False
            self._eof = True
            return False
        chunk = next(self._chunks, None)
        if chunk is None:
            self._eof = True
            return False
        chunk = chunk[: self._max_bytes - self.bytes_read]
        self.bytes_read += len(chunk)
        self._base += self._position
        self._buffer = self._buffer[self._position :] + chunk
        self._position = 0
        return True

    def _peek(self) -> int | None:
        """The next byte that is not white space or a comma (None at the end)."""
        while True:
            match = _SEPARATORS.match(self._buffer, self._position)
            assert match is not None  # the pattern matches the empty string
            self._position = match.end()
            if self._position < len(self._buffer):
                return self._buffer[self._position]
            if not self._more():
                return None

    def _open_list(self) -> None:
        """Move to just inside the events list: the document itself, or "traceEvents"."""
        first = self._peek()
        if first is None:
            raise TraceError("the trace is empty")
        if first == ord("{"):
            while (found := self._buffer.find(b'"traceEvents"', self._position)) < 0:
                self._position = max(self._position, len(self._buffer) - 16)
                if not self._more():
                    raise TraceError("no traceEvents list in the trace")
            self._position = found + len(b'"traceEvents"')
            while (char := self._peek()) == ord(":"):
                self._position += 1
            if char != ord("["):
                raise TraceError("traceEvents is not a list")
        elif first != ord("["):
            raise TraceError("not a Chrome trace (neither an object nor a list)")
        self._position += 1

    def _next_event(self) -> Any:
        """One event decoded on its own, or `_END` after the list (or at the byte cap)."""
        char = self._peek()
        if char is None:
            if self.complete:
                raise TraceError(f"the trace is truncated after {self.events:,} events")
            return _END
        if char == ord("]"):
            return _END
        while (end := self._value_end()) is None:
            if len(self._buffer) - self._position > MAX_EVENT_BYTES:
                raise TraceError(f"malformed event after {self.events:,} events")
            if not self._more():
                if not self.complete:
                    return _END  # cut by the cap in the middle of an event
                raise TraceError(
                    f"the trace is truncated or malformed after {self.events:,} events"
                )
        data = self._buffer[self._position : end]
        self._position = end
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
        try:  # NaN, or bytes that are not UTF-8: the stdlib reads them (replaced)
            return json.loads(data.decode("utf-8", errors="replace"))
        except ValueError:
            raise TraceError(
                f"the trace is truncated or malformed after {self.events:,} events"
            ) from None

    def _value_end(self) -> int | None:
        """Where the value at the position ends, or None if the buffer ends first."""
        buffer, start = self._buffer, self._position
        if buffer[start] not in _OPENERS:
            match = _SCALAR.match(buffer, start)
            if match is None and buffer[start] == _QUOTE and not self._eof:
                return None  # a string that goes on in the next chunk
            if match is None:
                return start + 1  # a stray character: the decoder says it is malformed
            if match.end() == len(buffer) and not self._eof:
                return None  # a number or a word may go on in the next chunk
            return match.end()
        depth = 0
        for match in _NESTING.finditer(buffer, start):
            token = buffer[match.start()]
            if token == _QUOTE:
                if match.end() - match.start() == 1:
                    return None  # a string that goes on in the next chunk
            elif token in _OPENERS:
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return match.end()
        return None


_END = object()
