"""`Client` and `Run`: a platform's runs, their history, samples and anomalies, in Python.

    from training_platform.client import Client

    client = Client("http://localhost:8000")          # or Client(database_url="sqlite:///...")
    run = client.run("grpo-7b-0042")
    history = run.history(fields=["reward.mean", "loss"])   # every step, a DataFrame
    history["reward.mean"].tail(100).mean()

Answers are pandas DataFrames when pandas is installed, lists of dicts
otherwise. Full histories come through the export endpoint at full fidelity
(Parquet when pyarrow is here and on the server, else JSONL); `max_points`
asks the downsampled history instead (what the dashboard draws).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from training_platform.client.errors import InvalidParameterError, MissingExtraError
from training_platform.client.frames import (
    answer,
    flatten_records,
    installed,
    parquet_answer,
    restore_nonfinite,
    series_rows,
)
from training_platform.client.http import Http


class Source(Protocol):
    def runs(
        self, *, project: str | None, tags: Sequence[str], statuses: Sequence[str]
    ) -> list[dict[str, Any]]: ...

    def run(self, job_id: str) -> dict[str, Any]: ...

    def export(
        self,
        job_id: str,
        kind: str,
        fmt: str,
        *,
        fields: Sequence[str] | None,
        start_step: int | None,
        end_step: int | None,
    ) -> bytes: ...

    def downsampled(
        self,
        job_id: str,
        *,
        fields: Sequence[str] | None,
        start_step: int | None,
        end_step: int | None,
        max_points: int,
    ) -> dict[str, Any]: ...


def _names(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not all(isinstance(one, str) for one in value):
        raise InvalidParameterError(f"{what}: give a string or a list of strings, not {value!r}")
    return list(value)


class Client:
    """A platform's runs, through its REST API (`url`, `token`) or read straight from
    its database (`database_url`: needs the `server` install)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        database_url: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
    ) -> None:
        if (url is None) == (database_url is None):
            raise InvalidParameterError("Client: give either a server's url or a database_url")
        self.source: Source
        if database_url is not None:
            from training_platform.client.local import LocalSource

            self.source = LocalSource(database_url)
        else:
            assert url is not None
            self.source = _remote(url, token, timeout=timeout, retries=retries)

    def runs(
        self,
        project: str | None = None,
        tag: str | Sequence[str] | None = None,
        status: str | Sequence[str] | None = None,
    ) -> list[Run]:
        """Every run (all pages), newest first; `tag`: runs with all these tags,
        `status`: runs in any of these statuses."""
        jobs = self.source.runs(
            project=project, tags=_names(tag, "tag"), statuses=_names(status, "status")
        )
        return [Run(self.source, job) for job in jobs]

    def run(self, job_id: str) -> Run:
        """One run; `RunNotFoundError` naming it when there is none."""
        return Run(self.source, self.source.run(job_id))

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _remote(url: str, token: str | None, *, timeout: float, retries: int) -> Source:
    from training_platform.client.remote import RemoteSource

    return RemoteSource(Http(url, token, timeout=timeout, retries=retries))


class Run:
    """A run as the jobs list shows it (`info`), and what was stored of it."""

    def __init__(self, source: Source, info: dict[str, Any]) -> None:
        self.source = source
        self.info = info

    job_id = property(lambda self: self.info["job_id"])
    name = property(lambda self: self.info.get("name"))
    tags = property(lambda self: self.info.get("tags") or [])
    status = property(lambda self: self.info.get("status"))
    project = property(lambda self: self.info.get("project"))
    config = property(lambda self: self.info.get("config"))

    def __repr__(self) -> str:
        return f"Run({self.job_id!r}, status={self.status!r}, name={self.name!r})"

    def history(
        self,
        fields: str | Sequence[str] | None = None,
        start_step: int | None = None,
        end_step: int | None = None,
        max_points: int | None = None,
    ) -> Any:
        """Every stored step in [start_step, end_step], one row each, a column per series
        (`loss.actor_loss`, `extra.actor/entropy`); `fields` picks series or groups (a
        flat name, `kl_divergence_max`, gives a column of that name: docs/contract.md).
        With `max_points`, at most that many points per series (bucket means, with
        `name:min`, `name:max`): what the dashboard draws, for long runs."""
        names = _names(fields, "fields") or None
        if max_points is not None:
            body = self.source.downsampled(
                self.job_id,
                fields=names,
                start_step=start_step,
                end_step=end_step,
                max_points=max_points,
            )
            return answer(series_rows(body))
        return self._export("metrics", names, start_step, end_step)

    def samples(
        self,
        step: int | None = None,
        start_step: int | None = None,
        end_step: int | None = None,
        fields: str | Sequence[str] | None = None,
    ) -> Any:
        """The generated samples stored (one row each, `rewards.*` and `extra.*` flat),
        of one `step` or of a range."""
        if step is not None:
            if start_step is not None or end_step is not None:
                raise InvalidParameterError("samples: give step, or start_step/end_step")
            start_step = end_step = step
        return self._export("samples", _names(fields, "fields") or None, start_step, end_step)

    def anomalies(self, start_step: int | None = None, end_step: int | None = None) -> Any:
        """The stored anomaly rows, one per step, type and source, in step order."""
        return self._export("anomalies", None, start_step, end_step)

    def _export(
        self, kind: str, fields: list[str] | None, start_step: int | None, end_step: int | None
    ) -> Any:
        def export(fmt: str) -> bytes:
            return self.source.export(
                self.job_id, kind, fmt, fields=fields, start_step=start_step, end_step=end_step
            )

        if installed("pyarrow"):
            try:
                data = export("parquet")
            except MissingExtraError:
                pass  # a server without pyarrow: JSONL, the same values
            else:
                return parquet_answer(data)
        data = export("jsonl")
        lines = [json.loads(line) for line in data.splitlines() if line]
        if kind == "metrics":
            return answer(flatten_records(lines))
        if kind == "samples":
            return answer(restore_nonfinite([_flat_sample(line) for line in lines], ["reward"]))
        return answer(lines)


def _flat_sample(sample: dict[str, Any]) -> dict[str, Any]:
    flat = {key: value for key, value in sample.items() if key not in ("rewards", "extra")}
    for group in ("rewards", "extra"):
        for name, value in (sample.get(group) or {}).items():
            flat[f"{group}.{name}"] = value
    return flat
