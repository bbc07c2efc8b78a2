"""`gpu-check`: what accelerators are here, and which model sizes fit on them.

The estimates are rules of thumb (formulas in docs/profiling.md): parameter
bytes per mode, times ``1 + overhead`` for activations, KV cache, the CUDA
context and allocator fragmentation. They answer "can this possibly fit?",
not "what batch size can I use" (that is `profile-inference`).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass
from typing import Any

from training_platform.tools import model_catalog

GIB = float(1 << 30)

# Bytes per parameter that every mode keeps resident.
# Full fine-tuning with Adam in mixed precision (ZeRO paper, Rajbhandari et al. 2020):
# 2 (fp16/bf16 weights) + 2 (gradients) + 4 (fp32 master weights) + 4 + 4 (Adam m, v).
FULL_FINETUNE_BYTES = 16.0
MODES: dict[str, str] = {
    "inference_fp32": "4 B/param",
    "inference_fp16": "2 B/param",
    "inference_bf16": "2 B/param",
    "inference_int8": "1 B/param",
    "full_finetune_adam_mixed": "16 B/param: 2 weights + 2 grads + 4 fp32 master + 8 Adam",
    "lora": "2 B/param frozen bf16 base + 16 B/param on the trainable fraction",
    "qlora": "0.5 B/param 4-bit base + 16 B/param on the trainable fraction",
}
_INFERENCE_BYTES = {
    "inference_fp32": 4.0,
    "inference_fp16": 2.0,
    "inference_bf16": 2.0,
    "inference_int8": 1.0,
}
# Short column titles for the terminal table.
_LABELS = {
    "inference_fp32": "infer fp32",
    "inference_fp16": "infer fp16",
    "inference_bf16": "infer bf16",
    "inference_int8": "infer int8",
    "full_finetune_adam_mixed": "full FT Adam",
    "lora": "LoRA",
    "qlora": "QLoRA",
}
_SUFFIXES = {"": 1e9, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)


def resolve_model(text: str) -> tuple[str, float]:
    """(name shown, parameters) of a named model (`model_catalog`) or a size (``7B``)."""
    named = model_catalog.lookup(text)
    if named is not None:
        return named
    try:
        return text, parse_model_size(text)
    except ValueError:
        known = ", ".join(model_catalog.NAMED_MODELS)
        raise ValueError(
            f"model size {text!r}: give a size (7B, 350M) or a name: {known}"
        ) from None


def parse_model_size(text: str) -> float:
    """Parameter count from ``7B``, ``1.5b``, ``350M``, ``1.2T`` or a bare number of billions."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"model size {text!r}: use a number with K, M, B or T (e.g. 7B, 350M)")
    number, suffix = match.groups()
    value = float(number)
    # A bare large number is a parameter count already (1.5e9), not billions.
    if not suffix and value >= 1e4:
        return value
    return value * _SUFFIXES[suffix.lower()]


def bytes_per_param(mode: str, lora_fraction: float) -> float:
    """Resident bytes per parameter of the base model for one mode (see `MODES`)."""
    if mode in _INFERENCE_BYTES:
        return _INFERENCE_BYTES[mode]
    if mode == "full_finetune_adam_mixed":
        return FULL_FINETUNE_BYTES
    if mode == "lora":
        return 2.0 + FULL_FINETUNE_BYTES * lora_fraction
    if mode == "qlora":
        return 0.5 + FULL_FINETUNE_BYTES * lora_fraction
    raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")


@dataclass(frozen=True)
class Estimate:
    """One model size in one mode, against the memory checked."""

    model: str
    params: float
    mode: str
    required_gib: float
    fits: bool | None


def estimate(
    model: str, params: float, *, overhead: float, lora_fraction: float, memory_gib: float | None
) -> list[Estimate]:
    """Every mode for one model: ``params * bytes_per_param * (1 + overhead)`` GiB."""
    rows = []
    for mode in MODES:
        required = params * bytes_per_param(mode, lora_fraction) * (1.0 + overhead) / GIB
        fits = None if memory_gib is None else required <= memory_gib
        rows.append(Estimate(model, params, mode, required, fits))
    return rows


def host_info() -> dict[str, Any]:
    """CPU model, logical cores and physical memory of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory: float | None
    try:
        import psutil

        memory = psutil.virtual_memory().total / GIB
    except ImportError:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
        except (AttributeError, ValueError, OSError):
            memory = None
    return {"cpu": cpu, "logical_cores": os.cpu_count(), "memory_gib": memory}


def cuda_inventory() -> tuple[list[dict[str, Any]], str | None]:
    """(CUDA devices, a note when there are none and why)."""
    try:
        import torch
    except ImportError:
        return [], "torch is not installed"
    if not torch.cuda.is_available():
        return [], f"no CUDA GPU visible to torch {torch.__version__}"
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        free, total = torch.cuda.mem_get_info(index)
        devices.append(
            {
                "index": index,
                "name": props.name,
                "total_memory_gib": total / GIB,
                "free_memory_gib": free / GIB,
                "compute_capability": f"{props.major}.{props.minor}",
                "multiprocessors": props.multi_processor_count,
                "bf16": bool(props.major >= 8),
            }
        )
    return devices, None


def gpu_check_report(
    model_sizes: list[str],
    *,
    memory_gib: float | None = None,
    overhead: float = 0.2,
    lora_fraction: float = 0.01,
    device: int | None = None,
    benchmark: bool = False,
    dtype: str | None = None,
    min_time_s: float = 0.25,
) -> dict[str, Any]:
    """Inventory, memory now, benchmark, estimates and verdicts as one JSON-able dict.

    `device` restricts the report to one CUDA device (a `ValueError` when
    there is no such device). The memory checked is `memory_gib` when given,
    else the smallest GPU's total memory (a model must fit on each device it
    is replicated to), else host RAM on a machine without a GPU. The
    benchmark runs on `device`, else the first GPU, else the CPU, in `dtype`
    (default bfloat16 on a GPU that has it, float16 on one that does not,
    float32 on the CPU).
    """
    if overhead < 0 or not 0 <= lora_fraction <= 1:
        raise ValueError("overhead must be >= 0 and lora_fraction within [0, 1]")
    models = [resolve_model(text) for text in model_sizes]
    devices, note = cuda_inventory()
    if device is not None:
        if device < 0 or device >= len(devices):
            have = f"{len(devices)} GPU(s)" if devices else f"no GPU ({note})"
            raise ValueError(f"device {device} does not exist: this machine has {have}")
        devices = [d for d in devices if d["index"] == device]
    host = host_info()
    measured = _measure(devices, benchmark=benchmark, dtype=dtype, min_time_s=min_time_s)
    if memory_gib is not None:
        checked, source = memory_gib, "given"
    elif devices:
        smallest = min(devices, key=lambda d: d["total_memory_gib"])
        checked, source = smallest["total_memory_gib"], f"cuda:{smallest['index']} total"
    else:
        checked, source = host["memory_gib"], "host RAM, no GPU"
    estimates = [
        asdict(row)
        for name, params in models
        for row in estimate(
            name,
            params,
            overhead=overhead,
            lora_fraction=lora_fraction,
            memory_gib=checked,
        )
    ]
    return {
        "devices": devices,
        "device_note": note,
        "host": host,
        "memory_checked_gib": checked,
        "memory_source": source,
        "overhead": overhead,
        "lora_fraction": lora_fraction,
        "formulas": {
            mode: f"params * {formula} * (1 + overhead)" for mode, formula in MODES.items()
        },
        "estimates": estimates,
        **measured,
        "seed_differences": model_catalog.SEED_DIFFERENCES,
    }


def _measure(
    devices: list[dict[str, Any]], *, benchmark: bool, dtype: str | None, min_time_s: float
) -> dict[str, Any]:
    """Memory in use now on each device (or the host), and the optional benchmark."""
    try:
        import torch

        from training_platform.tools import gpu_benchmark
    except ImportError:
        return {"memory_now": [], "benchmark": None, "benchmark_note": "torch is not installed"}
    targets = [torch.device("cuda", d["index"]) for d in devices] or [torch.device("cpu")]
    out: dict[str, Any] = {"memory_now": [gpu_benchmark.memory_now(t) for t in targets]}
    if not benchmark:
        return {**out, "benchmark": None, "benchmark_note": "skipped (--skip-throughput)"}
    chosen = targets[0]
    if dtype is None:
        bf16 = chosen.type == "cuda" and bool(devices[0]["bf16"])
        dtype = ("bfloat16" if bf16 else "float16") if chosen.type == "cuda" else "float32"
    result = gpu_benchmark.run_benchmark(chosen, dtype, min_time_s=min_time_s)
    return {**out, "benchmark": result, "benchmark_note": None}


def render_text(report: dict[str, Any]) -> str:
    """A terminal report: devices, host, then a model x mode table of GiB and verdicts."""
    lines = ["Devices"]
    for d in report["devices"]:
        lines.append(
            f"  cuda:{d['index']}  {d['name']}  {d['total_memory_gib']:.1f} GiB total, "
            f"{d['free_memory_gib']:.1f} GiB free, compute {d['compute_capability']}, "
            f"{d['multiprocessors']} SMs"
        )
    if not report["devices"]:
        lines.append(f"  none ({report['device_note']})")
    host = report["host"]
    ram = f"{host['memory_gib']:.1f} GiB RAM" if host["memory_gib"] else "RAM unknown"
    lines += [f"Host: {host['cpu']}, {host['logical_cores']} logical cores, {ram}", ""]
    lines += _render_measured(report)
    checked = report["memory_checked_gib"]
    against = f"{checked:.1f} GiB ({report['memory_source']})" if checked else "nothing"
    lines.append(
        f"Memory estimates in GiB (+{report['overhead']:.0%} overhead, LoRA trains "
        f"{report['lora_fraction']:.1%} of the parameters), checked against {against}:"
    )
    modes = list(MODES)
    headers = ["model", *(_LABELS[mode] for mode in modes)]
    table: list[list[str]] = []
    for model in dict.fromkeys(row["model"] for row in report["estimates"]):
        cells = {r["mode"]: r for r in report["estimates"] if r["model"] == model}
        row = [model]
        for mode in modes:
            cell = cells[mode]
            mark = "" if cell["fits"] is None else (" ✓" if cell["fits"] else " ✗")
            row.append(f"{cell['required_gib']:.1f}{mark}")
        table.append(row)
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(len(headers))]
    for row in [headers, *table]:
        lines.append("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    lines += ["", "✓ fits, ✗ does not fit. Formulas (params x bytes x (1 + overhead)):"]
    lines += [f"  {mode}: {formula}" for mode, formula in MODES.items()]
    return "\n".join([*lines, "", *_notes(report)])


def _notes(report: dict[str, Any]) -> list[str]:
    """What the figures leave out and what to do about it, for the models shown.

    The comparison with the seed layer's table stays in the JSON report
    (``seed_differences``): a user of this command never saw that table.
    """
    overhead = report["overhead"]
    notes = [
        "Notes:",
        f"  The +{overhead:.0%} overhead stands for activations, KV cache, the CUDA context "
        "and fragmentation;",
        "  long sequences or large batches need more: raise --overhead, or measure a real "
        "model with profile-inference.",
        "  Full fine-tuning sharded over N GPUs (FSDP, ZeRO-3) needs about 1/N of its "
        "figure on each.",
    ]
    shown = {row["model"] for row in report["estimates"]}
    if shown & model_catalog.MIXTURES_OF_EXPERTS:
        notes.append(
            "  A mixture of experts (DeepSeek-V3) must hold all its parameters to run, not "
            "only the ones active per token."
        )
    return notes


def _gib(value: float | None) -> str:
    return f"{value:.2f} GiB" if value is not None else "?"


def _render_measured(report: dict[str, Any]) -> list[str]:
    lines = ["Memory now"]
    for mem in report["memory_now"]:
        if mem["device"] == "cpu":
            lines.append(
                f"  host: {_gib(mem['free_gib'])} available of {_gib(mem['total_gib'])}; "
                f"this process: {_gib(mem['process_rss_gib'])} RSS"
            )
        else:
            lines.append(
                f"  {mem['device']}: {_gib(mem['free_gib'])} free of {_gib(mem['total_gib'])}; "
                f"this process: {_gib(mem['allocated_by_this_process_gib'])} allocated, "
                f"{_gib(mem['reserved_by_this_process_gib'])} reserved"
            )
    bench = report["benchmark"]
    if bench is None:
        lines.append(f"Throughput benchmark: {report['benchmark_note']}")
    else:
        mm, bw = bench["matmul"], bench["bandwidth"]
        lines.append(f"Throughput benchmark on {bench['measured']}:")
        lines.append(
            f"  matmul {mm['size']}x{mm['size']} {mm['dtype']}: {mm['tflops']:.3f} TFLOP/s "
            f"(median of {mm['repetitions']}, best {mm['best_tflops']:.3f})"
        )
        lines.append(
            f"  memory bandwidth (copy of {bw['buffer_mib']} MiB): {bw['gb_per_s']:.1f} GB/s "
            f"(median of {bw['repetitions']})"
        )
    return [*lines, ""]
