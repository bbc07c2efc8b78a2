"""A series answer, stage by stage: each stage in one module, importing only those before it.

1. `plan.py`   find what is stored for the range: bounds, rows up to a cap, the
               tier (exact rows, buckets from rows, stored buckets), the grid;
2. `read.py`   read the rows or stored buckets the plan names, ragged ends included;
3. `merge.py`  merge the pieces read onto the plan's grid;
4. `shape.py`  shape the JSON answer: columns, the series and byte bounds.

`answer.py` walks them once per answer. Below every stage: `buckets.py` (what
a bucket is) and `stored/` (the tables and the stored bytes, each read and
written in one place); `stored/refresh.py` is the write side, used by the
ingest path and by no stage (tests/test_layers.py).
"""
