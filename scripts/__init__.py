"""Operator scripts (`scripts/replicas.py`, ...). A package, so that `from scripts
import replicas` finds these and not the top-level `scripts` package verl installs."""
