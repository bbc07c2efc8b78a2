"""Trainer side: hooks, PlatformCallback, detectors and adapters (no server imports).

Importing this package needs only the standard library, orjson and platformdirs: no torch,
no FastAPI, no SQLAlchemy. The Hugging Face and verl adapters live in
`training_platform.callbacks.integrations` and import their library there.
"""

from training_platform.callbacks.base import Callback, CallbackList, StepContributor, StopTraining
from training_platform.callbacks.detectors.config import AnomalyConfig
from training_platform.callbacks.detectors.monitor import AnomalyMonitor
from training_platform.callbacks.platform_callback import PlatformCallback
from training_platform.callbacks.run import PlatformRun, platform_run
from training_platform.callbacks.trackers.metrics import (
    GRPOMetricsTracker,
    MetricTracker,
    ScoreDistributionTracker,
    TrainingLogger,
)
from training_platform.callbacks.trackers.profilers import (
    ComprehensiveProfiler,
    GPUMemoryProfiler,
    ThroughputTracker,
    TrainingTimer,
)

__all__ = [
    "AnomalyConfig",
    "AnomalyMonitor",
    "Callback",
    "CallbackList",
    "ComprehensiveProfiler",
    "GPUMemoryProfiler",
    "GRPOMetricsTracker",
    "MetricTracker",
    "PlatformCallback",
    "PlatformRun",
    "ScoreDistributionTracker",
    "StepContributor",
    "StopTraining",
    "ThroughputTracker",
    "TrainingLogger",
    "TrainingTimer",
    "platform_run",
]
