"""Turning the profiling kit on from the environment: what ``training-platform profile-run`` sets.

    PLATFORM_PROFILE=1                 PlatformCallback adds a StepProfiler (off by default)
    PLATFORM_PROFILE_TRACE=5,1,2       torch.profiler: wait, warm-up, active steps; "off": none

A training script is profiled without changing its code, as the documents'
``train.py --profiler on`` was: `PlatformCallback` calls `with_env_profiler`
on its contributors, so step time, memory (and leaks) and one torch.profiler
trace window land in ``{output_dir}/{job_id}_profiles`` beside the metrics.
Stages are the script's own to name: a script that times them builds its
`StepProfiler` itself (`env_profiler` gives one only when the switch is on),
and the callback then adds no second one.

A value the switch does not understand is logged once and leaves profiling
off: a typo must not fail a training run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from training_platform.callbacks.base import StepContributor

if TYPE_CHECKING:
    from training_platform.callbacks.profiling.step_profiler import StepProfiler
    from training_platform.callbacks.profiling.torch_trace import TraceSchedule

logger = logging.getLogger(__name__)

PROFILE_VAR = "PLATFORM_PROFILE"
TRACE_VAR = "PLATFORM_PROFILE_TRACE"
DEFAULT_TRACE = (5, 1, 2)  # TraceSchedule's defaults: wait, warm-up, active
_ON = frozenset({"1", "true", "on", "yes"})
_OFF = frozenset({"", "0", "false", "off", "no"})
TRACE_OFF = frozenset({"off", "0", "none", "no"})


def profiling_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``$PLATFORM_PROFILE`` asks for the profiler."""
    value = (os.environ if environ is None else environ).get(PROFILE_VAR, "").strip().lower()
    if value in _ON:
        return True
    if value not in _OFF:
        logger.warning("%s=%r: neither on (1, true) nor off (0, false); profiling stays off",
                       PROFILE_VAR, value)  # fmt: skip
    return False


def trace_schedule(environ: Mapping[str, str] | None = None) -> TraceSchedule | None:
    """The trace window ``$PLATFORM_PROFILE_TRACE`` names (``wait,warmup,active``), the
    kit's default when unset, None for ``off``; a malformed value: the default, logged."""
    from training_platform.callbacks.profiling.torch_trace import TraceSchedule

    value = (os.environ if environ is None else environ).get(TRACE_VAR, "").strip().lower()
    if value in TRACE_OFF:
        return None
    counts = DEFAULT_TRACE
    if value:
        try:
            wait, warmup, active = (int(part) for part in value.split(","))
            TraceSchedule(wait=wait, warmup=warmup, active=active)  # validates the counts
            counts = (wait, warmup, active)
        except ValueError:
            logger.warning("%s=%r: not 'wait,warmup,active' counts (active >= 1); using %s",
                           TRACE_VAR, value, ",".join(map(str, DEFAULT_TRACE)))  # fmt: skip
    return TraceSchedule(wait=counts[0], warmup=counts[1], active=counts[2], repeat=1)


def env_profiler(
    job_id: str,
    output_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> StepProfiler | None:
    """A `StepProfiler` for `job_id` when ``$PLATFORM_PROFILE`` is on, else None."""
    if not profiling_requested(environ):
        return None
    from training_platform.callbacks.profiling.step_profiler import StepProfiler

    return StepProfiler(job_id, output_dir, trace=trace_schedule(environ))


def with_env_profiler(
    job_id: str,
    output_dir: str | os.PathLike[str] | None,
    contributors: Sequence[StepContributor],
    environ: Mapping[str, str] | None = None,
) -> list[StepContributor]:
    """`contributors`, plus a `StepProfiler` when the switch is on and none is there yet
    (two would race for torch.profiler and write the same ``stage_times.json``)."""
    found = list(contributors)
    if not profiling_requested(environ):
        return found
    from training_platform.callbacks.profiling.step_profiler import StepProfiler

    if any(isinstance(contributor, StepProfiler) for contributor in found):
        return found
    profiler = env_profiler(job_id, output_dir, environ)
    return [*found, profiler] if profiler is not None else found
