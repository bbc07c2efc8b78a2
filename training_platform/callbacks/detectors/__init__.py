"""The anomaly detectors, one way up: the shared vocabulary (`findings`, `config`)
below, the detectors (`rl`, `loss`, their `windows`) above, the fused quiet
path on top of them, and `monitor` (AnomalyMonitor) over all. The platform
runs the same detectors over stored records.
"""
