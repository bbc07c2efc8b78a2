"""The profiling kit (docs/profiling.md): `StepProfiler` times stages, samples
memory and throughput and schedules torch.profiler traces; `stage_timer`,
`memory`, `torch_trace` and `summary` are its parts, `stats` their statistics.

Importing it loads neither torch nor the server, nor matplotlib.
"""

from training_platform.callbacks.profiling.step_profiler import StepProfiler
from training_platform.callbacks.profiling.torch_trace import TraceSchedule

__all__ = ["StepProfiler", "TraceSchedule"]
