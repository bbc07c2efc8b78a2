"""What the series path stores: the buckets' bytes (`codec.py`) and each table, read and
written in one place (`rows.py`, `metric_rollups.py`, `rollup_columns.py`), under every
stage of the read path; `refresh.py`, the write side, keeps the buckets current at ingestion.
"""
