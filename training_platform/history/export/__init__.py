"""Data out: a job's stored records, samples and anomalies as CSV, Parquet or JSONL files.

One implementation for the API's export endpoints and `training-platform export`:
`sources.py` reads a job's rows in step-ordered chunks (a keyset cursor, one
short session per chunk, up to the last step stored when the export began),
`columns.py` flattens records into dotted columns and decides their types
from the job's stored field set, `writers.py` turns the chunks into bytes as
they come (CSV, JSONL, Parquet row groups). Memory stays about one chunk
whatever the run's length.
"""
