"""TensorBoard event files -> scalars by step -> the platform's records.

Events are TensorBoard's own protobuf messages (`tensorboard.compat.proto`),
parsed by the protobuf library, never by hand; the framing is `tfrecord.py`.
A scalar is either a legacy `simple_value` (torch's `SummaryWriter`,
tensorboardX, verl's `tensorboard` logger) or a rank-0 tensor of the
`scalars` plugin (TensorFlow 2, `new_style=True`). Histograms, images, text
and the like are not scalars and are passed over. The hparams plugin's
session start (`add_hparams`) is the run's config.

A step's scalars arrive as separate events, possibly in separate reads: the
records built here hold what one read saw of a step, and the store merges a
step's records (docs/contract.md, "Runs logged by other tools").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from training_platform.callbacks.wire.records import build_record

HPARAMS_PLUGIN = "hparams"
SCALARS_PLUGIN = "scalars"

_TENSOR_VALUES = {
    types_pb2.DT_FLOAT: ("float_val", "<f"),
    types_pb2.DT_DOUBLE: ("double_val", "<d"),
    types_pb2.DT_HALF: ("half_val", None),
    types_pb2.DT_INT32: ("int_val", "<i"),
    types_pb2.DT_INT64: ("int64_val", "<q"),
}


@dataclass(frozen=True)
class Scalar:
    step: int
    wall_time: float
    tag: str
    value: float


@dataclass
class DecodedEvents:
    scalars: list[Scalar] = field(default_factory=list)
    config: dict[str, Any] | None = None  # the latest hparams seen
    errors: list[str] = field(default_factory=list)  # one per undecodable record


def decode_events(records: Iterable[bytes]) -> DecodedEvents:
    """The scalars (in file order) and hparams of framed event records."""
    decoded = DecodedEvents()
    for index, data in enumerate(records):
        try:
            event = event_pb2.Event.FromString(data)
        except DecodeError as exc:
            decoded.errors.append(f"record {index}: not an event ({exc})")
            continue
        if not event.HasField("summary"):
            continue  # the file's version, a graph, a session log, ...
        for value in event.summary.value:
            plugin = value.metadata.plugin_data.plugin_name
            if plugin == HPARAMS_PLUGIN:
                hparams = _hparams(value)
                if hparams is not None:
                    decoded.config = hparams
                continue
            number = _scalar(value, plugin)
            if number is not None:
                decoded.scalars.append(Scalar(event.step, event.wall_time, value.tag, number))
    return decoded


def records_of(scalars: Iterable[Scalar]) -> list[dict[str, Any]]:
    """One record per step (steps in first-seen order): its tags mapped onto the
    record groups as the trainers' own keys are (`actor/pg_loss` ->
    `loss.actor_loss`, `train/loss` -> `loss.total_loss`, the rest under `extra`),
    timestamped with the step's latest wall time."""
    tags: dict[int, dict[str, float]] = {}
    times: dict[int, float] = {}
    for scalar in scalars:
        tags.setdefault(scalar.step, {})[scalar.tag] = scalar.value
        times[scalar.step] = max(times.get(scalar.step, 0.0), scalar.wall_time)
    return [build_record(step, values, timestamp=times[step]) for step, values in tags.items()]


def _scalar(value: summary_pb2.Summary.Value, plugin: str) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor" or plugin not in (SCALARS_PLUGIN, ""):
        return None
    tensor = value.tensor
    if tensor.tensor_shape.dim or tensor.dtype not in _TENSOR_VALUES:
        return None  # not a rank-0 number
    repeated, packed = _TENSOR_VALUES[tensor.dtype]
    listed = getattr(tensor, repeated)
    if listed:
        if tensor.dtype == types_pb2.DT_HALF:
            return float(struct.unpack("<e", struct.pack("<H", listed[0] & 0xFFFF))[0])
        return float(listed[0])
    if packed is not None and tensor.tensor_content:
        return float(struct.unpack_from(packed, tensor.tensor_content)[0])
    return None


def _hparams(value: summary_pb2.Summary.Value) -> dict[str, Any] | None:
    """`add_hparams`' values, from the plugin's session start; None for its other parts."""
    try:
        data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    except DecodeError:
        return None
    if not data.HasField("session_start_info"):
        return None
    config: dict[str, Any] = {}
    for name, hparam in data.session_start_info.hparams.items():
        kind = hparam.WhichOneof("kind")
        if kind == "number_value":
            config[name] = hparam.number_value
        elif kind == "string_value":
            config[name] = hparam.string_value
        elif kind == "bool_value":
            config[name] = hparam.bool_value
    return config
