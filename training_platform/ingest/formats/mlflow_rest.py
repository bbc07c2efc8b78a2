"""One run behind an MLflow tracking server (`http(s)://host:port`) as a job's metrics.

Read through MLflow's REST API 2.0 with the standard library (`urllib`): the
server needs neither the mlflow package nor an HTTP client of its own.

- ``GET /api/2.0/mlflow/runs/get`` once per sync: the run's status (the job's),
  params (its config), tags, name, and each metric key with its newest value;
- ``GET /api/2.0/mlflow/metrics/get-history`` per key, in pages of `PAGE`
  values (`max_results`, `page_token`). Each key is its own kind,
  ``metrics.<key>``, with its own cursor in `sync_state`: the server's page
  token of the page to start from (`fingerprint`; tokens are opaque and only
  ever handed back as the server issued them).

Exactly once without a row cursor: the history is ordered by (timestamp,
step, value), and a value committed late (MLflow's asynchronous logging) lands
among the newest ones, so each read that reaches the end starts the next one
at its last page, or at the page before when the last holds fewer than
`LOOKBACK` values. Values read again change nothing: records are merged into
the stored steps and a step that did not change is neither written nor
announced (`merged_steps.py`). A key whose newest value has not changed since
it was last read to its end (a digest of it kept in `offset`) is not asked for
at all, so an idle run costs one request per poll. Work per poll is bounded by
the batch size (`ROW_BYTES` per value); a backlog is read in batches from the
next page (`discarding` marks that catch-up, which needs no look-back).

An unreachable server, a refused request or an unknown run is a
`MetricsSourceError` naming the server with its password hidden (`shown_url`);
a user and password in the URI are sent as HTTP Basic credentials.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import threading
import urllib.error
import urllib.request
from functools import partial
from typing import Any, Final
from urllib.parse import urlencode, urlsplit, urlunsplit

from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.mlflow_files import (
    MAX_FILES,
    about_of,
    failing_kind,
    key_kind,
    records_of,
)
from training_platform.ingest.formats.mlflow_store import STATUSES, shown_url
from training_platform.ingest.line_scanner import MAX_ERRORS, ReadBatch, ReadPosition

API: Final = "/api/2.0/mlflow"
PAGE: Final = 1000  # values per history request
LOOKBACK: Final = 100  # fewer than this on the last page: start at the page before
ROW_BYTES: Final = 100  # a batch's values: about max_bytes / ROW_BYTES
TIMEOUT_S: Final = 10.0
MAX_RESPONSE_BYTES: Final = 32 << 20
TOKEN_LIMIT: Final = 128  # `sync_state.fingerprint`

_guard = threading.Lock()
# (uri, run id) -> its job status as the last runs/get of this process said it.
_statuses: dict[tuple[str, str], str | None] = {}


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def request_json(uri: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
    """GET `API + path` of the server at `uri`; `MetricsSourceError` when it fails."""
    parts = urlsplit(uri)
    where = parts.netloc.rpartition("@")[2]
    base = urlunsplit((parts.scheme, where, parts.path.rstrip("/"), "", ""))
    request = urllib.request.Request(f"{base}{API}/{path}?{urlencode(params)}")
    if parts.username is not None:
        credentials = f"{parts.username}:{parts.password or ''}".encode()
        request.add_header("Authorization", f"Basic {base64.b64encode(credentials).decode()}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            data = answer.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise MetricsSourceError(f"MLflow server {shown_url(uri)}: {_refusal(exc)}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise MetricsSourceError(f"cannot reach MLflow server {shown_url(uri)}: {reason}") from None
    if len(data) > MAX_RESPONSE_BYTES:
        raise MetricsSourceError(f"MLflow server {shown_url(uri)}: answer over 32 MiB")
    try:
        body = json.loads(data)
    except ValueError:
        raise MetricsSourceError(f"MLflow server {shown_url(uri)}: answer is not JSON") from None
    if not isinstance(body, dict):
        raise MetricsSourceError(f"MLflow server {shown_url(uri)}: answer is not an object")
    return body


def _refusal(exc: urllib.error.HTTPError) -> str:
    """An error answer as MLflow words it (`error_code`, `message`), else its status."""
    try:
        body = json.loads(exc.read(64 * 1024))
        return f"{body['error_code']}: {str(body['message'])[:300]}"
    except Exception:
        return f"HTTP {exc.code} {exc.reason}"


def get_run(uri: str, run_id: str) -> dict[str, Any]:
    run = request_json(uri, "runs/get", {"run_id": run_id}).get("run")
    if not isinstance(run, dict):
        raise MetricsSourceError(f"MLflow server {shown_url(uri)}: no run {run_id} in its answer")
    return run


def _pairs(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    return {
        str(item["key"]): item
        for item in items
        if isinstance(item, dict) and isinstance(item.get("key"), str)
    }


def read_history(
    position: ReadPosition,
    max_bytes: int,
    *,
    uri: str,
    run_id: str,
    key: str,
    newest: tuple[Any, ...],
    about: dict[str, Any],
) -> ReadBatch:
    """The values of `key` from the page `position` starts at, one record per step.

    `offset` keeps a digest of the key's newest value when it was last read to its
    end: while runs/get still says that, nothing is asked (see the module doc)."""
    mark = _digest(newest)
    if not position.discarding and position.offset == mark:
        return ReadBatch(records=[], position=position, file_size=mark)
    limit = max(PAGE, max_bytes // ROW_BYTES)
    previous, current = None, position.fingerprint  # page tokens: None is the first page
    values: list[dict[str, Any]] = []
    errors: list[str] = []
    malformed = 0
    while True:
        params = {"run_id": run_id, "metric_key": key, "max_results": PAGE}
        page = request_json(uri, "metrics/get-history", {
            **params, **({"page_token": current} if current else {})})  # fmt: skip
        listed = page.get("metrics") or []
        for entry in listed if isinstance(listed, list) else []:
            try:
                values.append(_value(entry))
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                malformed += 1
                if len(errors) < MAX_ERRORS:
                    errors.append(f"{key}: value {entry!r:.80} not read ({exc})")
        following = page.get("next_page_token") or None
        if following is None or len(values) >= limit:
            break
        previous, current = current, str(following)
    at_end = following is None
    if at_end:  # look back (see the module doc): the last page, or the one before
        short = len(listed) < LOOKBACK and previous is not None
        resume = previous if short else current
    else:
        resume = str(following)
    if resume is not None and len(resume) > TOKEN_LIMIT:
        raise MetricsSourceError(f"MLflow server {shown_url(uri)}: page token too long to keep")
    records = records_of(key, values, errors)
    after = ReadPosition(mark if at_end else 0, resume, discarding=not at_end)
    return ReadBatch(
        records=records,
        position=after,
        malformed=malformed,
        at_eof=at_end,
        file_size=after.offset,
        errors=errors[:MAX_ERRORS],
        about=dict(about) if records else None,
    )


def _digest(newest: tuple[Any, ...]) -> int:
    """A stable 56-bit digest of a key's newest (step, timestamp, value), never 0."""
    data = json.dumps(newest, default=str).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:7], "big") or 1


def _value(entry: Any) -> dict[str, Any]:
    """One history entry; int64 fields may come as JSON strings, NaN as "NaN"."""
    step = int(entry.get("step", 0))
    if step < 0:
        raise ValueError(f"negative step {step}")
    return {
        "step": step,
        "timestamp": int(entry.get("timestamp", 0)) / 1000,
        "value": float(entry.get("value", 0.0)),
    }


def server_kinds(uri: str, run_id: str) -> tuple[LineFileKind, ...]:
    """One kind per metric key of the run (as runs/get lists them), in key order."""
    try:
        run = get_run(uri, run_id)
    except MetricsSourceError as exc:
        return (failing_kind(f"cannot read MLflow run {run_id}: {exc}"),)
    info = run.get("info") if isinstance(run.get("info"), dict) else {}
    data = run.get("data") if isinstance(run.get("data"), dict) else {}
    assert isinstance(info, dict) and isinstance(data, dict)
    with _guard:
        _statuses[(uri, run_id)] = STATUSES.get(str(info.get("status", "")).upper())
    params = {key: str(item.get("value", "")) for key, item in _pairs(data.get("params")).items()}
    tags = {key: str(item.get("value", "")) for key, item in _pairs(data.get("tags")).items()}
    about = about_of(params, tags, info.get("run_name") or None)
    newest = _pairs(data.get("metrics"))
    return tuple(
        key_kind(key, partial(
            read_history, uri=uri, run_id=run_id, key=key, about=about,
            newest=tuple(newest[key].get(field) for field in ("step", "timestamp", "value")),
        ))
        for key in sorted(newest)[:MAX_FILES]
    )  # fmt: skip


def server_status(uri: str, run_id: str) -> str | None:
    """The job status of the run: what this sync's runs/get said (read before its
    metrics, so a finished run's last values are read before it is said finished),
    else asked now; None when the server cannot say."""
    with _guard:
        if (uri, run_id) in _statuses:
            return _statuses.pop((uri, run_id))
    try:
        info = get_run(uri, run_id).get("info")
    except MetricsSourceError:
        return None  # the metrics read says what is wrong
    return STATUSES.get(str(info.get("status", "")).upper()) if isinstance(info, dict) else None
