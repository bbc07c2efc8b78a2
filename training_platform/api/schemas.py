"""Request and response models of the REST API."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from training_platform.api.request_body import RequestBody
from training_platform.callbacks.wire.schema import JOB_ID_PATTERN
from training_platform.ingest.host_names import check_ssh_host
from training_platform.ingest.safe_paths import check_path_text

JobId = Annotated[
    str,
    Field(
        pattern=JOB_ID_PATTERN.pattern,
        description="1-128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit.",
        examples=["grpo_run_7"],
    ),
]

# A local path the server will open: refused here (422) when the kernel could
# not take it (NUL, a name over 255 bytes, ~nouser), instead of failing as a
# 500 inside the file-system call.
LocalPath = Annotated[str, AfterValidator(lambda text: check_path_text(text, "the path"))]
# A host name or an IP address ("[v6]" is stored bare); anything else, a
# leading "-" or "user@host" included, is a 422 naming `ssh.host`.
SSHHost = Annotated[str, AfterValidator(check_ssh_host)]


class SSHSourceIn(RequestBody):
    """Where an SSH job's files are. Key-based auth only: no password is accepted."""

    host: SSHHost = Field(
        min_length=1,
        max_length=255,
        description="A host name or an IPv4/IPv6 address (the user and port have their own "
        "fields).",
        examples=["gpu-node-3"],
    )
    port: int = Field(default=22, ge=1, le=65535)
    username: str = Field(min_length=1, max_length=255, examples=["alice"])
    key_path: LocalPath = Field(
        min_length=1, description="Private key file; must lie inside the server's key directory."
    )
    remote_dir: str = Field(
        min_length=1, examples=["/home/alice/.local/share/training-platform/metrics"]
    )
    remote_rollout_dir: str | None = Field(
        default=None,
        min_length=1,
        description="verl's rollout dumps on that host (`trainer.rollout_data_dir`: one "
        "`{step}.jsonl` per step), read as the job's samples.",
        examples=["/home/alice/verl_rollouts"],
    )


JobFormat = Literal["platform", "verl_file", "tensorboard", "trackio", "mlflow", "wandb"]


class JobCreate(RequestBody):
    """Register a job: exactly one of `metrics_dir` (a local directory) and `ssh`."""

    job_id: JobId
    metrics_dir: LocalPath | None = Field(default=None, min_length=1, examples=["/data/runs"])
    ssh: SSHSourceIn | None = None
    rollout_dir: LocalPath | None = Field(
        default=None,
        min_length=1,
        description="With `metrics_dir`: verl's rollout dumps (`trainer.rollout_data_dir`: "
        "one `{step}.jsonl` per step), read as the job's samples; it may not exist yet. "
        "Without it, `{job_id}_rollouts/` next to the metrics file is read when present.",
        examples=["/data/verl_rollouts/run7"],
    )
    format: JobFormat = Field(
        default="platform",
        description="Whose files: `platform` (the callback's `{job_id}_metrics.jsonl`, ...), "
        "`verl_file` (verl's `file` logger, `{job_id}.jsonl` in the directory, or `file`: "
        'lines `{"step": N, "data": {...}}`) or `tensorboard` (the `events.out.tfevents.*` '
        "files of the run directory, `metrics_dir` or `ssh.remote_dir`) or `trackio` (a run "
        "of a Trackio project database: `metrics_dir`, `project`, `run`) or `mlflow` (a run "
        "of an MLflow tracking database, file store or tracking server: `tracking_uri`, "
        "`run_id`; or of a file store on an SSH host: `ssh`, its `remote_dir` the store's "
        "`mlruns` directory, and `run_id`) or `wandb` (a W&B offline "
        "run directory, `offline-run-*`, holding `run-<id>.wandb`; `metrics_dir` or "
        "`ssh.remote_dir`); docs/contract.md, 'Runs logged by other tools'.",
    )
    file: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="With `verl_file`: the file's name in the directory when it is not "
        "`{job_id}.jsonl` (verl names it after the experiment).",
        examples=["qwen2_7b_grpo.jsonl"],
    )
    project: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="With `trackio`: the Trackio project (its database `{project}.db` in "
        "`metrics_dir`, Trackio's directory).",
        examples=["math-grpo"],
    )
    run: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="With `trackio`: the run's name in that project.",
        examples=["brisk-sun-3"],
    )
    tracking_uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="With `mlflow`: the MLflow tracking database (`sqlite:///<file>` or "
        "`postgresql://...`), file store (`file:///<dir>/mlruns` or its absolute path, on "
        "this machine) or tracking server (`http(s)://[user:password@]host:port`, read "
        "through its REST API); no `metrics_dir` or `ssh` then.",
        examples=["sqlite:////data/mlflow.db"],
    )
    run_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="With `mlflow`: the run's id in that store (with `ssh`: in the file "
        "store `ssh.remote_dir`).",
        examples=["151a458c3fa14e43ba3f6147cc5242e4"],
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> JobCreate:
        if self.run_id is not None and self.format != "mlflow":
            raise ValueError("'run_id' names an MLflow run (format mlflow), 'run' a Trackio one")
        if self.format == "mlflow" or self.tracking_uri is not None:
            return self  # a tracking database, not files: the registry checks the fields
        if (self.metrics_dir is None) == (self.ssh is None):
            raise ValueError("give exactly one of 'metrics_dir' and 'ssh'")
        if self.rollout_dir is not None and self.ssh is not None:
            raise ValueError("an SSH job's rollout directory is 'ssh.remote_rollout_dir'")
        return self


class SSHSourceOut(BaseModel):
    host: str
    port: int
    username: str
    key_path: str
    remote_dir: str
    remote_rollout_dir: str | None = None


class SyncStateOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    offset: int = Field(description="Bytes of the metrics file ingested so far.")
    lines_malformed: int = Field(description="Lines skipped as invalid JSON or invalid records.")
    lines_oversized: int = Field(description="Lines skipped for exceeding the size limit.")
    records_ingested: int
    resets: int = Field(description="Times the file was found truncated or replaced.")
    updated_at: float | None


class RunOut(BaseModel):
    """The run file's other fields, as the trainer wrote them (any JSON)."""

    framework: Any = None
    git: Any = None
    host: Any = None
    command: Any = None
    started_at: float | None = None
    config_dropped: Any = None
    file_error: str | None = Field(
        default=None, description="Why the newest version was refused; null: it was read."
    )
    file_refusals: int = Field(default=0, description="Versions refused so far.")


class IngesterOut(BaseModel):
    instance_id: str
    hostname: str
    pid: int


class JobOut(BaseModel):
    job_id: str
    source: Literal["local", "ssh", "tracking"] = Field(
        description="Where its records are read: files here, files on an SSH host, or a "
        "tracking database, file store or server (`tracking_uri`)."
    )
    discovered: bool = Field(description="Found in PLATFORM_METRICS_DIR rather than registered.")
    metrics_dir: str | None
    ssh: SSHSourceOut | None
    rollout_dir: str | None = Field(
        default=None,
        description="Where verl's rollout dumps are read from, as registered (for an SSH job: "
        "on its host). Null: a local job's `{job_id}_rollouts/` next to its metrics file, "
        "read when present; an SSH job has none.",
    )
    status: str = Field(
        description="pending, running, completed, failed or stopped (from the status file), "
        "or stalled: running, but the metrics file went silent for far longer than usual."
    )
    current_step: int | None
    total_steps: int | None
    anomaly_detected: bool = Field(
        description="The run had an anomaly worth stopping for, whichever side found it: "
        "the trainer's status file says so, or the platform found a critical incident "
        "(a NaN loss, a KL explosion). Set once, never cleared."
    )
    anomaly_reason: str | None = Field(
        description="The trainer's reason, else the first critical incident: "
        "'<type> at step N: <message>'."
    )
    trainer_anomaly_detected: bool = Field(
        description="What the trainer's status file itself says (`anomaly_detected`)."
    )
    has_anomaly: bool = Field(description="Any anomaly stored for this job, from any source.")
    anomaly_count: int
    health: Literal["ok", "warning", "critical"] = Field(
        description="critical: a critical anomaly was found in the run; warning: a warning "
        "anomaly, a stalled run, or a status file saying anomaly_detected; ok otherwise."
    )
    metrics_count: int
    latest_step: int | None
    started_at: float | None
    updated_at: float | None
    created_at: float
    last_synced_at: float | None
    last_sync_error: str | None
    sync: SyncStateOut | None
    project: str | None = Field(default=None, description="From the run file.")
    name: str | None = Field(
        default=None, description="As set by PATCH, else the run file's; null: neither."
    )
    tags: list[str] = Field(
        default_factory=list, description="As set by PATCH, else the run file's."
    )
    notes: str | None = Field(default=None, description="Free text set by PATCH.")
    config: dict[str, Any] | None = Field(
        default=None,
        description="The run file's config, secrets masked (by the callback, again when stored).",
    )
    run: RunOut | None = Field(
        default=None, description="The rest of the run file; null: none read."
    )
    format: str = Field(
        default="platform", description="Whose files the job is read from (see `JobCreate`)."
    )
    file: str | None = Field(
        default=None, description="The file its metrics are read from, when named (`JobCreate`)."
    )
    source_run: str | None = Field(
        default=None, description="The run within that source (Trackio's name, MLflow's id)."
    )
    tracking_uri: str | None = Field(
        default=None, description="The MLflow tracking store or server read, its password hidden."
    )
    ingested_by: IngesterOut | None = Field(
        default=None,
        description="Several processes on PostgreSQL: the server process that holds the "
        "job's ingest lease now (docs/live.md, 'Leases'); null on SQLite, or while no live "
        "process holds it.",
    )


Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^,]*$")]


class JobPatch(RequestBody):
    """What the platform keeps about a run besides its files; a field left out is
    unchanged, null gives `name`/`tags` back to the run file and clears `notes`."""

    name: str | None = Field(default=None, min_length=1, max_length=256)
    tags: list[Tag] | None = Field(default=None, max_length=64)
    notes: str | None = Field(default=None, max_length=65_536)


class JobList(BaseModel):
    """One page of jobs (`limit`, `offset`); the `X-Total-Count` header has the total."""

    jobs: list[JobOut]


AnomalySource = Literal["callback", "platform", "samples", "system"]


class AnomalyOut(BaseModel):
    """One incident (default) or one stored per-source row (`raw=true`)."""

    step: int
    type: str
    severity: str = Field(description="The highest of its sources': info, warning or critical.")
    message: str
    source: AnomalySource = Field(description="The first of `sources` (the callback's first).")
    sources: list[AnomalySource] = Field(
        description="Who found it: the trainer's callback, the platform's detectors over the "
        "metrics, or both; or the platform's detectors over the generated samples."
    )
    created_at: float = Field(description="When it was first stored.")
    evidence: list[int] | None = Field(
        default=None,
        description="For a finding from samples: the indexes of the step's samples that show it.",
    )
    end_step: int = Field(
        description="The last step its condition held before it ended or escalated "
        "(`step` when the platform has no extent for it).",
    )
    ongoing: bool | None = Field(
        default=None,
        description="The run is running and the condition held recently enough that the "
        "incident is still open (incidents only; null with raw=true).",
    )
    episode: int | None = Field(
        default=None,
        description="The onset step of the first incident of its episode: incidents that "
        "start within 10 steps of each other are one episode (incidents only).",
    )


class AnomalyList(BaseModel):
    job_id: str
    anomalies: list[AnomalyOut]
    next_start_step: int | None = Field(
        default=None,
        description="More anomalies remain: ask again with start_step set to this value.",
    )
    truncated: bool = Field(
        default=False,
        description="One step alone had more rows than `limit`: the rest of it was left out.",
    )


class MetricsHistory(BaseModel):
    """Records in the nested shape (docs/contract.md §2); non-finite numbers as strings."""

    job_id: str
    metrics: list[dict[str, Any]]
    count: int
    next_start_step: int | None = Field(
        description="Pass as start_step to get the next page; null when this was the last."
    )
    truncated: bool = Field(
        default=False,
        description="The page ended before `limit` because of the byte cap "
        "(PLATFORM_HISTORY_MAX_RESPONSE_BYTES); follow next_start_step for the rest.",
    )


class SyncOut(BaseModel):
    job_id: str
    new_metrics: int = Field(description="Records written by this sync (one per step).")
    lines_malformed: int
    lines_oversized: int
    resets: int
    offset: int
    file_size: int
    at_eof: bool = Field(
        description="The whole file is ingested. False when the request's time budget ran "
        "out first: the background sync carries on from `offset`."
    )
    bytes_remaining: int = Field(
        description="Bytes of the metrics file not ingested yet (file_size - offset)."
    )
    status_changed: bool
    errors: list[str] = Field(description="The first few reasons lines were skipped.")


class ErrorOut(BaseModel):
    detail: Any
    code: str
