"""torch.profiler outputs of `profile-inference`, from one forward at the chosen batch size.

- ``trace.json``: Chrome/Perfetto trace (open in https://ui.perfetto.dev);
- ``stacks.txt``: Python + operator stacks with their self time in
  microseconds, one ``frame;frame;... value`` line each (flame-graph input:
  ``flamegraph.pl stacks.txt > flame.svg``);
- ``operators.csv``: one row per operator (the kit's ``op_stats.csv`` columns:
  CPU time, CUDA time on a GPU, memory);
- ``operators_cpu.txt``, ``operators_memory.txt`` (and ``operators_cuda.txt`` on
  a GPU): torch's own tables, sorted by CPU time, memory, CUDA time.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from training_platform.callbacks.profiling.torch_trace import op_stats_rows, write_op_stats
from training_platform.tools.inference_target import InferenceTarget, forward

_ROWS = 30  # operators per text table
# Kineto (torch.profiler's C++ side) writes these to file descriptor 2 at every
# start and stop; KINETO_LOG_LEVEL would hide them but is read when torch is
# imported, before this tool runs.
_KINETO_NOISE = (b"USDT:", b"STAGE:")


def profile_one_batch(
    target: InferenceTarget, batch_size: int, *, device: torch.device, output_dir: Path
) -> dict[str, str]:
    """Profile one warmed-up forward of `batch_size` samples; returns {output: path}."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    if target.batch_at is not None and target.dataset_size:
        batch = target.batch_at(batch_size, 0, device).inputs
    else:
        batch = target.make_batch(batch_size, device)
    # Two profiled forwards: with Python stacks recorded, every Python frame
    # becomes an event of its own and would crowd the operator tables.
    verbose = torch._C._profiler._ExperimentalConfig(verbose=True)  # stacks in export_stacks
    with torch.inference_mode(), _without_kineto_noise():
        forward(target.model, batch)  # warm-up: first-call costs are not the model's
        _sync(device)
        with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
            forward(target.model, batch)
            _sync(device)
        with profile(
            activities=activities, with_stack=True, experimental_config=verbose
        ) as stack_prof:
            forward(target.model, batch)
            _sync(device)
    output_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    trace = output_dir / "trace.json"
    prof.export_chrome_trace(str(trace))
    files["trace"] = str(trace)
    stacks = output_dir / "stacks.txt"
    metric = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    stack_prof.export_stacks(str(stacks), metric)
    files["stacks"] = str(stacks)
    events = prof.key_averages()
    operators = output_dir / "operators.csv"
    write_op_stats(operators, op_stats_rows(events, cuda=cuda, memory=True))
    files["operators"] = str(operators)
    tables = {"operators_cpu": "cpu_time_total", "operators_memory": "self_cpu_memory_usage"}
    if cuda:
        tables["operators_cuda"] = "cuda_time_total"
        tables["operators_memory"] = "self_cuda_memory_usage"
    for name, sort_by in tables.items():
        path = output_dir / f"{name}.txt"
        path.write_text(_table(events, sort_by, batch_size) + "\n", encoding="utf-8")
        files[name] = str(path)
    return files


@contextmanager
def _without_kineto_noise() -> Iterator[None]:
    """Hold back kineto's ``USDT:``/``STAGE:`` lines; pass other stderr output on.

    They are written by C++ straight to descriptor 2, so `sys.stderr` cannot
    catch them: the descriptor itself is pointed at a file for the duration.
    """
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (a daemon): nothing to clean up
        yield
        return
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [
                line
                for line in captured.read().splitlines(keepends=True)
                if not line.startswith(_KINETO_NOISE)
            ]
            if kept:
                os.write(2, b"".join(kept))


def _table(events: Any, sort_by: str, batch_size: int) -> str:
    title = f"One forward of batch size {batch_size}, operators by {sort_by}\n"
    return title + str(events.table(sort_by=sort_by, row_limit=_ROWS))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
