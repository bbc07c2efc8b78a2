"""Query parameters and answers more than one router declares the same way."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from training_platform.api.schemas import ErrorOut
from training_platform.callbacks.wire import MAX_STEP  # BIGINT: larger fails in the database
from training_platform.errors import InvalidParameterError

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "Unknown job"}
}

StepQuery = Annotated[
    int | None, Query(ge=0, le=MAX_STEP, description="Inclusive; steps are integers >= 0.")
]


def check_step_range(start_step: int | None, end_step: int | None) -> None:
    """422 for a range that ends before it starts."""
    if start_step is not None and end_step is not None and start_step > end_step:
        raise InvalidParameterError(f"start_step {start_step} is after end_step {end_step}")
