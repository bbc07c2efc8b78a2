"""One check of every REST route's query string, before any route runs.

FastAPI validates each declared parameter by its type, but three things slip
through that: a name the route does not take (ignored), a single-valued
parameter given twice (collapsed to its last value), and text the databases
cannot hold (a NUL byte: PostgreSQL refuses it with a DataError, SQLite cuts
the SQL text at it). Each is a 422 in the usual validation-error shape, naming
the parameter, so no route has to remember any of them.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from training_platform.store.storable import unstorable_character

_SEQUENCES = (list, tuple, set, frozenset, Sequence)


def _takes_several(annotation: Any) -> bool:
    """Whether a parameter's annotation is a sequence (`list[str] | None` is)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(_takes_several(arm) for arm in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _takes_several(typing.get_args(annotation)[0])
    return origin in _SEQUENCES or annotation in _SEQUENCES


def _declared_query_params(dependant: Dependant) -> dict[str, bool]:
    """The query parameters a route takes (its dependencies' included), each
    with whether it takes several values (`?status=a&status=b`)."""
    declared: dict[str, bool] = {}
    pending = [dependant]
    while pending:
        current = pending.pop()
        for param in current.query_params:
            declared[param.alias] = _takes_several(param.field_info.annotation)
        pending.extend(current.dependencies)
    return declared


def _error(name: str, message: str, kind: str) -> dict[str, Any]:
    return {"loc": ("query", name), "msg": message, "type": kind}


def check_query_params(request: Request) -> None:
    """422 for an unknown, repeated single-valued or unstorable query parameter.

    A misspelt parameter (`maxpoints=100`) would otherwise be ignored without a
    word, and `?jobs=a&jobs=b` would answer for `b` alone.
    """
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    # Walked per request, not cached: a handful of dependants, microseconds.
    declared = _declared_query_params(route.dependant)
    errors: list[dict[str, Any]] = []
    takes = ", ".join(sorted(declared)) or "none"
    for name in sorted(set(request.query_params)):
        values = request.query_params.getlist(name)
        if name not in declared:
            message = f"unknown query parameter {name!r} (this route takes: {takes})"
            errors.append(_error(name, message, "extra_forbidden"))
            continue
        if len(values) > 1 and not declared[name]:
            message = f"query parameter {name!r} takes one value; it was given {len(values)}"
            errors.append(_error(name, message, "repeated_parameter"))
            continue
        for value in values:
            bad = unstorable_character(value)
            if bad is not None:
                message = f"query parameter {name!r} contains {bad}, which no text here can hold"
                errors.append(_error(name, message, "unstorable_text"))
                break
    if errors:
        raise RequestValidationError(errors)
