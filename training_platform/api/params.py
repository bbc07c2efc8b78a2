"""Query parameters and answers more than one router declares the same way."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from training_platform.api.schemas import ErrorOut

# MAX_STEP: BIGINT, larger fails in the database
from training_platform.callbacks.wire.schema import (
    FREE_GROUPS,
    GROUP_FIELDS,
    MAX_STEP,
)
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


def parse_fields(fields: str | None) -> frozenset[str] | None:
    """The `fields=` entries; 422 naming an entry that cannot be a series or group.

    A known group's fields are fixed (`loss.actor_los` is a typo, refused here);
    `timing` and `extra` take any name. A group outside both may still be one
    the trainer invented (stored under `other`): it is checked against the
    answer by `_check_other_groups_found`.
    """
    if fields is None:
        return None
    names = frozenset(name.strip() for name in fields.split(",") if name.strip())
    if not names:
        raise InvalidParameterError("fields must name at least one series or group")
    for name in sorted(names):
        group, _, field = name.partition(".")
        known = GROUP_FIELDS.get(group)
        if known is not None and field and field not in known:
            raise InvalidParameterError(
                f"fields: unknown field {name!r} (group {group!r} has {', '.join(known)})"
            )
        if group in FREE_GROUPS and "." in name and not field:
            raise InvalidParameterError(f"fields: {name!r} names no field")
    return names
