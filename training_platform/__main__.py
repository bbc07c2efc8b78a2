"""`python -m training_platform ...` is the same as `training-platform ...`."""

from training_platform.entry import main

main()
