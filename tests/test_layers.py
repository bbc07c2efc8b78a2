"""The package's layers (docs/architecture.md) hold: who may import whom, no cycles, small modules.

Read from the source with `ast`, so a new import that breaks a rule fails
here with the file and the import named, before it becomes a tangle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "training_platform"

# Sub-package -> the sub-packages it may import (besides itself). The server
# core is layered store < history < ingest < live < services < api; the
# trainer side (callbacks) imports nothing of the server.
ALLOWED: dict[str, set[str]] = {
    "callbacks": {"errors"},
    "profile_report": {"callbacks", "errors"},
    "errors": set(),
    "settings": {"callbacks", "webhook_settings"},  # the default metrics directory
    "webhook_settings": set(),  # a part of Settings in a module of its own
    "store": {"callbacks", "errors"},
    "history": {"store", "callbacks", "errors"},
    "ingest": {"history", "store", "callbacks", "errors", "settings", "__init__"},
    "live": {"ingest", "history", "store", "callbacks", "errors", "settings", "__init__"},
    "services": {"live", "ingest", "settings"},
    "api": {
        "profile_report",
        "services",
        "live",
        "ingest",
        "history",
        "store",
        "callbacks",
        "errors",
        "settings",
        "__init__",
    },
}
MAX_LINES = 420  # "about 400": a module past it has a seam worth cutting


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


MODULES = {name for name, _ in modules()}


def imports(path: Path, *, top_level_only: bool) -> Iterator[tuple[int, str]]:
    """(line, module) of each `training_platform` import; with `top_level_only`,
    those run at import time (not inside functions or `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            # `from training_platform.ingest import persister` imports a module.
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name for name in submodules if name in MODULES] or [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith("training_platform"):
                yield node.lineno, name


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_each_layer_imports_only_the_layers_below_it() -> None:
    broken = []
    for name, path in modules():
        layer = layer_of(name)
        if layer not in ALLOWED:
            continue  # entry points (cli, demo, tools) may use any layer
        for line, imported in imports(path, top_level_only=False):
            target = layer_of(imported)
            if target != layer and target not in ALLOWED[layer]:
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert broken == []


def import_graph(*, top_level_only: bool, under: str = "training_platform") -> dict[str, set[str]]:
    """Module -> the modules it imports, both `under` (a package's dotted name)."""
    known = {
        name: path for name, path in modules() if name == under or name.startswith(under + ".")
    }
    return {
        name: {
            imported
            for _, imported in imports(path, top_level_only=top_level_only)
            if imported in known and imported != name and not name.startswith(imported + ".")
        }
        for name, path in known.items()
    }


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return cycles


def test_no_import_cycle_between_modules() -> None:
    assert find_cycles(import_graph(top_level_only=True)) == []


def test_no_module_is_much_over_400_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for _, path in modules()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# The trainer side's rooms (callbacks/<room>/ or callbacks/<module>.py) -> the
# rooms they may import (besides themselves): one way up, so the detectors
# never reach for the writer that runs them, nor the wire format for either.
TRAINER_ROOMS: dict[str, set[str]] = {
    "base": set(),
    "wire": set(),
    "detectors": {"wire", "base"},
    "writer": {"detectors", "wire", "base"},
    "profiling": {"wire", "base"},
    "system": {"wire"},  # the host sampler and `sysmon`: psutil, NVML, the system file's name
    "platform_callback": {"system", "writer", "detectors", "profiling", "wire", "base"},
    "run": {"platform_callback", "base"},
    "trackers": {"profiling", "platform_callback", "wire", "base"},
    "integrations": {
        "platform_callback", "run", "writer", "detectors", "wire", "base", "profiling", "trackers",
        "system",
    },
    "__init__": {
        "platform_callback", "run", "detectors", "base", "trackers", "profiling", "wire", "writer"
    },
}  # fmt: skip


def room_of(module: str) -> str | None:
    """`training_platform.callbacks.wire.schema` -> `wire`; None outside callbacks/."""
    parts = module.split(".")
    if parts[:2] != ["training_platform", "callbacks"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def test_each_trainer_room_imports_only_the_rooms_below_it() -> None:
    broken = []
    rooms = set()
    for name, path in modules():
        room = room_of(name)
        if room is None:
            continue
        rooms.add(room)
        assert room in TRAINER_ROOMS, f"{name}: a new room; give it its place in TRAINER_ROOMS"
        for line, imported in imports(path, top_level_only=False):
            target = room_of(imported)
            if target is not None and target != room and target not in TRAINER_ROOMS[room]:
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert broken == []
    assert rooms == set(TRAINER_ROOMS)  # every room listed exists


def test_the_detectors_import_one_way_up() -> None:
    """findings/config below, the detectors above, the quiet path, then the monitor:
    no module of the room imports one at or above its own level."""
    level = {"config": 0, "windows": 0, "findings": 1, "rl": 2, "loss": 3, "loss_start": 3}
    level["quiet_path"] = 4
    level["monitor"] = 5
    broken = []
    for name, path in modules():
        parts = name.split(".")
        if parts[:3] != ["training_platform", "callbacks", "detectors"] or len(parts) < 4:
            continue
        for line, imported in imports(path, top_level_only=False):
            target = imported.split(".")
            if target[:3] == parts[:3] and len(target) > 3 and level[target[3]] >= level[parts[3]]:
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert broken == []


# The series read path (history/series/, docs/architecture.md): its places in
# the order a request walks them, each importing only those before it. What a
# bucket is and what is stored (the bytes, each table) lie below the four
# stages, plan -> read -> merge -> shape; `answer` walks them once per answer.
SERIES_ORDER = (
    "buckets",
    "stored", "stored.codec", "stored.rows", "stored.metric_rollups", "stored.rollup_columns",
    "stored.refresh",
    "plan", "read", "merge", "shape",
    "answer",
)  # fmt: skip
SERIES = "training_platform.history.series"
WRITE_SIDE = f"{SERIES}.stored.refresh"  # the ingest path's, never the read path's


def series_place(module: str) -> str | None:
    """`training_platform.history.series.stored.codec` -> `stored.codec`; None elsewhere."""
    if not module.startswith(SERIES + "."):
        return None
    return ".".join(module.split(".")[3:5])


def test_each_series_stage_imports_only_the_stages_before_it() -> None:
    """plan never reaches for read, merge or shape; shape reads nothing back; and
    function-level imports count too."""
    rank = {place: position for position, place in enumerate(SERIES_ORDER)}
    broken = []
    places = set()
    for name, path in modules():
        place = series_place(name)
        if place is None:
            continue
        places.add(place)
        assert place in rank, f"{name}: a new stage; give it its place in SERIES_ORDER"
        for line, imported in imports(path, top_level_only=False):
            target = series_place(imported)
            if target is not None and rank[target] > rank[place]:
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert broken == []
    assert places == set(SERIES_ORDER)  # every place listed exists


def test_the_read_path_never_imports_the_write_side() -> None:
    readers = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for name, path in modules()
        if name.startswith("training_platform.history") and name != WRITE_SIDE
        for line, imported in imports(path, top_level_only=False)
        if imported == WRITE_SIDE
    ]
    assert readers == []


def test_no_two_history_modules_import_each_other_even_lazily() -> None:
    """The global cycle test reads top-level imports only; within history/ an import
    inside a function or under `if TYPE_CHECKING:` counts too (the old
    downsample <-> bucket_codec pair hid that way)."""
    assert find_cycles(import_graph(top_level_only=False, under="training_platform.history")) == []


def test_the_rules_can_fail(tmp_path: Path) -> None:
    """The readers above see a forbidden import, a cycle's edges and a long file."""
    module = tmp_path / "bad.py"
    module.write_text(
        "from training_platform.live.hub import LiveHub\n"
        "def later():\n    from training_platform.api.main import create_app\n"
    )
    assert [m for _, m in imports(module, top_level_only=False)] == [
        "training_platform.live.hub",
        "training_platform.api.main",
    ]
    assert [m for _, m in imports(module, top_level_only=True)] == ["training_platform.live.hub"]
    assert layer_of("training_platform.live.hub") not in ALLOWED["store"]
    writer = room_of("training_platform.callbacks.writer.record_writer")
    assert writer not in TRAINER_ROOMS["detectors"] and room_of("training_platform.api") is None
    assert series_place(f"{SERIES}.stored.codec") == "stored.codec"
    assert series_place("training_platform.history.compare") is None
    assert find_cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
