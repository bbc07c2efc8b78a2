"""Stage 3 of a series answer: the pieces read, merged onto the plan's grid.

A piece goes to the bucket its first step falls in, and pieces sharing a
bucket merge exactly (`Bucket.merge`: min of mins, max of maxes, sums of
sums), so whatever was read (rows, stored buckets of any level) the answer has
at most one point per grid bucket.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from training_platform.history.series.buckets import Bucket
from training_platform.history.series.read import Piece
from training_platform.history.series.stored.codec import PackedBucket, PackedRun


def coalesce(pieces: Iterable[Piece], start_step: int, width: int) -> list[Piece]:
    """Merge step-ordered pieces into buckets `[start_step + k*width, ...)`.

    A piece goes to the bucket its first step falls in, so the result has at
    most ceil(span / width) buckets whatever the pieces were (rows, rollup
    nodes of any size), and empty buckets are simply absent. A piece alone in
    its bucket is passed through as it is (the pieces are not reused); so is
    a whole run of stored buckets (`PackedRun`) whose buckets each fall in a
    bucket of their own, the common case, without an object per bucket.
    """
    out: list[Piece] = []
    current_index: int | None = None
    merged: Bucket | None = None  # out[-1] once it is a copy; None while it is a piece
    for piece in pieces:
        parts: Sequence[Bucket | PackedBucket]
        if isinstance(piece, PackedRun):
            indices = [(first - start_step) // width for first in piece.first_steps]
            # Stored in step order, so distinct indices are increasing ones.
            if indices[0] != current_index and len(set(indices)) == len(indices):
                out.append(piece)
                current_index, merged = indices[-1], None
                continue
            parts = piece.split()
        else:
            parts = (piece,)
        for part in parts:
            index = (part.first_step - start_step) // width
            if index != current_index:
                out.append(part)
                current_index, merged = index, None
                continue
            if merged is None:
                # A second piece for this bucket: merge into a copy, not into the piece.
                last = out.pop()
                if isinstance(last, PackedRun):  # its last bucket shares this bucket
                    *head, last = last.split()
                    out += head
                merged = Bucket(last.first_step, last.last_step)
                merged.merge(last)
                out.append(merged)
            merged.merge(part)
    return out
