"""A real (tiny) GRPO run on CPU that reports through `PlatformCallback`.

`run_demo(...)` is the Python entry point; `cli.demo_train` the command line.
Importing this package does not import torch; `run_demo` does.
"""

from training_platform.demo.trainer import DemoConfig, DemoResult, run_demo

__all__ = ["DemoConfig", "DemoResult", "run_demo"]
