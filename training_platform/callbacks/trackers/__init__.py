"""The Profiling & Metrics layer's API (docs/metrics-api.md): `metrics`
(TrainingLogger, GRPO and score trackers), `profilers` (ComprehensiveProfiler
and its parts), on the `metric_tracker` series and the profiling kit.
"""
