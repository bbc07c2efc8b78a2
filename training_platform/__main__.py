"""`python -m training_platform ...` is the same as `training-platform ...`."""

from training_platform.cli import main

main()
