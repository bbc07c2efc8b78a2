"""Trainer side: hooks, PlatformCallback, detectors and adapters (no server imports).

Importing this package needs only the standard library and orjson: no torch,
no FastAPI, no SQLAlchemy. The Hugging Face and verl adapters live in
`training_platform.callbacks.integrations` and import their library there.
"""

from training_platform.callbacks.anomaly import AnomalyConfig, AnomalyMonitor
from training_platform.callbacks.base import Callback, CallbackList, StepContributor, StopTraining
from training_platform.callbacks.platform_callback import PlatformCallback
from training_platform.callbacks.run import PlatformRun, platform_run

__all__ = [
    "AnomalyConfig",
    "AnomalyMonitor",
    "Callback",
    "CallbackList",
    "PlatformCallback",
    "PlatformRun",
    "StepContributor",
    "StopTraining",
    "platform_run",
]
