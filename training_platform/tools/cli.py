"""Command-line entry points of the tools, as plain typer-ready functions.

Registered by the main CLI as ``training-platform gpu-check`` and
``training-platform profile-inference``; each imports its heavy dependencies
(torch, matplotlib, rich) only when it runs.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_MODEL_SIZES = ["0.5B", "1.5B", "7B", "13B", "70B"]


class DType(enum.StrEnum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: comma-separated integers", param_hint=option) from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{text!r}: integers >= 1", param_hint=option)
    return values


def gpu_check(
    model_size: Annotated[
        list[str] | None,
        typer.Option(
            "--model-size",
            "-m",
            help="Model size to estimate (7B, 350M, 1.2T); repeat for several. "
            f"Default: {', '.join(DEFAULT_MODEL_SIZES)}.",
        ),
    ] = None,
    memory_gib: Annotated[
        float | None,
        typer.Option(
            "--memory-gib",
            min=0.0,
            help="Check against this much memory per device instead of the detected GPU "
            "(or host RAM when there is no GPU).",
        ),
    ] = None,
    overhead: Annotated[
        float,
        typer.Option(
            min=0.0, help="Extra fraction for activations, KV cache, CUDA context (0.2 = +20%)."
        ),
    ] = 0.2,
    lora_fraction: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Fraction of parameters LoRA trains (0.01 = 1%)."),
    ] = 0.01,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of a table.")
    ] = False,
) -> None:
    """Show the GPUs (name, memory, compute capability) and which model sizes fit.

    Estimates inference at fp32/fp16/bf16/int8, full fine-tuning with Adam in
    mixed precision, LoRA and QLoRA, each as parameters x bytes per parameter
    x (1 + overhead); see docs/profiling.md for the formulas.
    """
    from training_platform.tools.gpu_check import gpu_check_report, render_text

    try:
        report = gpu_check_report(
            model_size or DEFAULT_MODEL_SIZES,
            memory_gib=memory_gib,
            overhead=overhead,
            lora_fraction=lora_fraction,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model-size") from None
    typer.echo(json.dumps(report, indent=2) if json_output else render_text(report))


def profile_inference(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="'module:factory' returning a torch.nn.Module, or 'tiny' (built-in transformer).",
        ),
    ] = "tiny",
    batch_sizes: Annotated[
        str, typer.Option("--batch-sizes", "-b", help="Comma-separated batch sizes to sweep.")
    ] = "1,2,4,8,16,32",
    warmup: Annotated[int, typer.Option(min=0, help="Untimed runs per batch size.")] = 3,
    runs: Annotated[int, typer.Option(min=1, help="Timed runs per batch size.")] = 10,
    device: Annotated[str, typer.Option(help="'auto', 'cpu', 'cuda' or 'cuda:N'.")] = "auto",
    dtype: Annotated[DType, typer.Option(help="Weights dtype.")] = DType.float32,
    inputs: Annotated[
        str | None,
        typer.Option(
            help="'module:fn' with fn(batch_size, device) -> batch (tensor, tuple or dict). "
            "Default: the model's make_batch(), else --input-shape."
        ),
    ] = None,
    input_shape: Annotated[
        str | None,
        typer.Option(help="Shape of one sample for random float inputs, e.g. '3,224,224'."),
    ] = None,
    accuracy: Annotated[
        str | None,
        typer.Option(help="'module:fn' with fn(outputs, batch) -> float, run per batch size."),
    ] = None,
    max_latency_ms: Annotated[
        float | None,
        typer.Option(min=0.0, help="Best batch size must keep p95 latency within this."),
    ] = None,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Where results, plots and trace go.")
    ] = Path("inference_profile"),
    trace: Annotated[
        bool, typer.Option(help="Write a Chrome trace of one batch at the best size.")
    ] = True,
    plots: Annotated[bool, typer.Option(help="Draw latency/throughput/memory PNGs.")] = True,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Sweep batch sizes of a torch model: latency, throughput, peak memory, best batch size.

    Writes results.csv, results.json, latency.png, throughput.png, memory.png,
    report.txt and trace.json to --output-dir, then prints the report.
    """
    sizes = _int_list(batch_sizes, "--batch-sizes")
    shape = _int_list(input_shape, "--input-shape") if input_shape else None
    from training_platform.tools.profile_inference import run_profile

    try:
        payload = run_profile(
            model,
            output_dir,
            batch_sizes=sizes,
            warmup=warmup,
            runs=runs,
            device=device,
            dtype=dtype.value,
            inputs=inputs,
            input_shape=shape,
            accuracy=accuracy,
            max_latency_ms=max_latency_ms,
            trace=trace,
            plots=plots,
            progress=progress,
        )
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        # A bad module:factory, inputs that do not fit the model, no GPU for --device cuda.
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(Path(payload["files"]["report"]).read_text(encoding="utf-8"), nl=False)
    typer.echo(f"Results in {output_dir}")
