"""Data out: a job's stored records, samples and anomalies as CSV, Parquet or JSONL files.

One implementation for the API's export endpoints and `training-platform export`:
`sources.py` plans an export (the snapshot's last step, the columns) and reads
a job's rows in step-ordered chunks (a keyset cursor, one short session per
chunk, up to the last step stored when the export began); `metrics.py` reads
the records for CSV and Parquet column by column, after a column pass over
their JSON groups' shapes; `columns.py` holds the columns' kinds and the
chunks of columns; `writers.py` turns the chunks into bytes as they come
(CSV, JSONL, Parquet row groups). Memory stays about one chunk whatever the
run's length.
"""
