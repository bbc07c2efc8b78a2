"""Flat metric names (the stored columns', the design documents') for the API's series.

The API names a value of a record `group.field` (`kl.max`, docs/contract.md §2).
Wherever a caller names a series (`fields=` of the history, compare and export
routes, `training-platform export --fields`, the client's `history(fields=)`),
two flat spellings of the fixed fields are taken as well:

- the stored column (`training_metrics.kl_max`: `store/metric_rows.py`);
- the design documents' `TrainingMetric` name (`kl_divergence_max`).

An answer names a series the way it was asked: `fields=kl_divergence_max`
answers `series["kl_divergence_max"]` (a CSV column of that name), so a
caller never has to map names back. A series asked under two names (`kl`
and `kl_divergence_max`) comes under both. The table is docs/contract.md's
"Metric names".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from training_platform.callbacks.wire.schema import FREE_GROUPS, GROUP_FIELDS
from training_platform.store.metric_rows import COLUMN_OF

# The design documents' names where they differ from the stored column's; the
# documents' other fields (`actor_loss`, `reward_mean`, ...) are the columns'.
DOCUMENT_NAMES: Final[dict[str, tuple[str, str]]] = {
    "kl_divergence_max": ("kl", "max"),
    "grad_norm_actor": ("gradient", "actor_norm"),
    "grad_norm_critic": ("gradient", "critic_norm"),
    "gpu_memory_allocated_gib": ("performance", "gpu_memory_allocated"),
}
# Flat name -> the series it names.
FLAT_NAMES: Final[dict[str, str]] = {
    **{column: f"{group}.{name}" for (group, name), column in COLUMN_OF.items()},
    **{flat: f"{group}.{name}" for flat, (group, name) in DOCUMENT_NAMES.items()},
}
# A flat name never shadows a group: `fields=kl` stays the whole group.
assert not FLAT_NAMES.keys() & {*GROUP_FIELDS, *FREE_GROUPS}


@dataclass(frozen=True)
class FieldNames:
    """`fields=` resolved: what to read, and under which names to answer it."""

    read: frozenset[str] | None  # the entries in our names (None: every series)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # ours -> flat
    direct: frozenset[str] = frozenset()  # the entries asked in our names

    def names_of(self, key: str) -> tuple[str, ...]:
        """The names series `key` is answered under: the flat names it was asked
        by, and its own when it was also asked as itself or as part of its group."""
        flat = self.aliases.get(key)
        if flat is None:
            return (key,)
        if key in self.direct or key.partition(".")[0] in self.direct:
            return (key, *flat)
        return flat

    def rename_answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """A series answer (`/metrics?max_points=`, a compared run) in the asked names,
        in place: `series` and `series_omitted` (with its count)."""
        if not self.aliases:
            return body
        # The same columns under two names: JSON writes them twice, nothing is copied.
        body["series"] = {
            name: columns for key, columns in body["series"].items() for name in self.names_of(key)
        }
        omitted = body.get("series_omitted")
        if omitted:
            renamed = [name for key in omitted for name in self.names_of(key)]
            body["series_omitted_count"] += len(renamed) - len(omitted)
            body["series_omitted"] = sorted(renamed)
        return body

    def explain(self) -> str:
        """` ('kl_divergence_max' is 'kl.max')`, to follow an error naming our names."""
        pairs = [f"{flat!r} is {key!r}" for key, names in self.aliases.items() for flat in names]
        return f" ({', '.join(pairs)})" if pairs else ""


def resolve_fields(names: Iterable[str] | None) -> FieldNames:
    """`fields=` entries with each flat name replaced by the series it names; other
    entries (series, groups, unknown names) are left for the caller to check."""
    if names is None:
        return FieldNames(None)
    aliases: dict[str, list[str]] = {}
    direct: set[str] = set()
    for name in sorted(set(names)):
        ours = FLAT_NAMES.get(name)
        if ours is None:
            direct.add(name)
        else:
            aliases.setdefault(ours, []).append(name)
    return FieldNames(
        read=frozenset(direct | aliases.keys()),
        aliases={key: tuple(flat) for key, flat in aliases.items()},
        direct=frozenset(direct),
    )


_KNOWN: Final = (
    *GROUP_FIELDS,
    *FREE_GROUPS,
    *(f"{group}.{name}" for group, fields in GROUP_FIELDS.items() for name in fields),
    *FLAT_NAMES,
)


def did_you_mean(name: str) -> str:
    """` (did you mean 'kl_divergence_max'?)` for a near miss of a known name, else ''."""
    close = difflib.get_close_matches(name, _KNOWN, n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""
