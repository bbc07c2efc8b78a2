"""What a step becomes on disk, off the training thread: the step's metrics
merged, checked by the detectors, written with the status file by the writer
thread; `log_samples` and its backlog; draining the writers at exit.
"""
