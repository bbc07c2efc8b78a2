"""Command-line entry points of the tools, as plain typer-ready functions.

Registered by the main CLI as ``training-platform gpu-check`` and
``training-platform profile-inference``; each imports its heavy dependencies
(torch, matplotlib, rich) only when it runs.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_MODEL_SIZES = ["0.5B", "1.5B", "7B", "13B", "70B"]  # kept for callers; see below


class DType(enum.StrEnum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


def gpu_check(
    model_size: Annotated[
        list[str] | None,
        typer.Option(
            "--model-size",
            "-m",
            help="Model to estimate: a size (7B, 350M, 1.2T) or a name (DeepSeek-Math-7B, "
            "Qwen2.5-7B, Llama-3-70B, ...); repeat for several. Default: every named model.",
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
    device: Annotated[
        int | None, typer.Option("--device", min=0, help="Only this CUDA device (index).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", help="Also write the report as JSON to this file.")
    ] = None,
    skip_throughput: Annotated[
        bool, typer.Option("--skip-throughput", help="Skip the matmul/bandwidth benchmark.")
    ] = False,
    dtype: Annotated[
        DType | None,
        typer.Option(
            help="Benchmark dtype. Default: bfloat16 (float16 on older GPUs); CPU float32."
        ),
    ] = None,
) -> None:
    """Show the GPUs, their memory in use now, a short benchmark, and which models fit.

    Estimates inference at fp32/fp16/bf16/int8, full fine-tuning with Adam in
    mixed precision, LoRA and QLoRA, each as parameters x bytes per parameter
    x (1 + overhead); see docs/profiling.md for the formulas. Without a GPU
    the benchmark measures the CPU and says so.
    """
    from training_platform.tools.gpu_check import gpu_check_report, render_text
    from training_platform.tools.model_catalog import DEFAULT_MODELS

    try:
        report = gpu_check_report(
            model_size or DEFAULT_MODELS,
            memory_gib=memory_gib,
            overhead=overhead,
            lora_fraction=lora_fraction,
            device=device,
            benchmark=not skip_throughput,
            dtype=dtype.value if dtype else None,
        )
    except ValueError as exc:
        hint = "--device" if str(exc).startswith("device") else "--model-size"
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    if output is not None:
        from training_platform.callbacks.trackers.metrics import write_json_atomic

        write_json_atomic(output, report)
    typer.echo(json.dumps(report, indent=2) if json_output else render_text(report))


def profile_inference(
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="'module:factory' returning a torch.nn.Module, or 'tiny' (built-in transformer).",
        ),
    ] = None,
    batch_sizes: Annotated[
        str | None,
        typer.Option("--batch-sizes", "-b", help="Comma-separated batch sizes to sweep."),
    ] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="Untimed runs per batch size.")] = None,
    runs: Annotated[
        int | None, typer.Option(min=1, help="Timed runs per batch size (at least).")
    ] = None,
    min_time_s: Annotated[
        float | None,
        typer.Option(min=0.0, help="Keep timing a batch size until this many seconds (default 0)."),
    ] = None,
    device: Annotated[str | None, typer.Option(help="'auto', 'cpu', 'cuda' or 'cuda:N'.")] = None,
    dtype: Annotated[DType | None, typer.Option(help="Weights dtype.")] = None,
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
        Path | None,
        typer.Option("--output-dir", "-o", help="Where results go (default results)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="YAML or TOML file of these settings; flags win over it."),
    ] = None,
    hf_model: Annotated[
        str | None,
        typer.Option(
            help="Hugging Face sequence classifier: a local directory, or a hub name "
            "(from the local cache, else downloaded)."
        ),
    ] = None,
    dataset: Annotated[
        Path | None, typer.Option(help="Labelled CSV to run (needs --hf-model).")
    ] = None,
    dataset_name: Annotated[
        str | None,
        typer.Option(help="Hugging Face dataset (hub name or directory) instead of a CSV."),
    ] = None,
    split: Annotated[str | None, typer.Option(help="Split of --dataset-name (test).")] = None,
    sample_sizes: Annotated[
        str | None,
        typer.Option(help="Also run the first N samples once, per N: '100,500,1000'."),
    ] = None,
    text_column: Annotated[str | None, typer.Option(help="CSV text column (text).")] = None,
    label_column: Annotated[str | None, typer.Option(help="CSV label column (label).")] = None,
    label_map: Annotated[
        Path | None, typer.Option(help="JSON file mapping each CSV label to a label id.")
    ] = None,
    max_length: Annotated[
        int | None, typer.Option(min=1, help="Tokens per text at most (128).")
    ] = None,
    trace: Annotated[
        bool,
        typer.Option(
            "--trace/--no-trace",
            " /--skip-profiling",
            help="Profile one batch at the best size (trace, stacks, operator tables).",
        ),
    ] = True,
    plots: Annotated[
        bool,
        typer.Option("--plots/--no-plots", " /--skip-viz", help="Draw the PNG plots."),
    ] = True,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Sweep batch sizes of a torch model: latency, throughput, memory, best batch size.

    Writes baseline_metrics.json, detailed_metrics.csv,
    baseline_summary_report.txt, plots/, profiler/ and logs/ to --output-dir,
    then prints the report (docs/profiling.md).
    """
    from training_platform.tools.inference_config import int_list, load_config

    try:
        file = load_config(config) if config is not None else {}
        if label_map is not None:
            file["label_map"] = json.loads(label_map.read_text(encoding="utf-8"))
        elif isinstance(file.get("label_map"), str):  # a config may name the JSON file
            file["label_map"] = json.loads(Path(file["label_map"]).read_text(encoding="utf-8"))

        def pick(flag: object, key: str, default: object) -> Any:
            return flag if flag is not None else file.get(key, default)

        if dataset is not None or dataset_name is not None:
            # One dataset on the command line replaces the file's, of either kind.
            file.pop("dataset", None)
            file.pop("dataset_name", None)
        shape = pick(input_shape, "input_shape", None)
        dataset_path = pick(dataset, "dataset", None)
        samples = pick(sample_sizes, "sample_sizes", None)
        options = {
            "batch_sizes": int_list(
                pick(batch_sizes, "batch_sizes", "1,2,4,8,16,32"), "batch sizes"
            ),
            "input_shape": int_list(shape, "--input-shape") if shape else None,
            "warmup": int(pick(warmup, "warmup", 3)),
            "runs": int(pick(runs, "runs", 10)),
            "min_time_s": float(pick(min_time_s, "min_time_s", 0.0)),
            "device": str(pick(device, "device", "auto")),
            "dtype": str(pick(dtype.value if dtype else None, "dtype", "float32")),
            "inputs": pick(inputs, "inputs", None),
            "accuracy": pick(accuracy, "accuracy", None),
            "max_latency_ms": pick(max_latency_ms, "max_latency_ms", None),
            "hf_model": pick(hf_model, "hf_model", None),
            "dataset": Path(dataset_path) if dataset_path else None,
            "dataset_name": pick(dataset_name, "dataset_name", None),
            "split": str(pick(split, "split", "test")),
            "sample_sizes": int_list(samples, "sample sizes") if samples else [],
            "text_column": str(pick(text_column, "text_column", "text")),
            "label_column": str(pick(label_column, "label_column", "label")),
            "label_map": file.get("label_map"),
            "max_length": int(pick(max_length, "max_length", 128)),
            "trace": trace and not file.get("skip_profiling", False),
            "plots": plots and not file.get("skip_viz", False),
        }
        if options["dtype"] not in DType.__members__:
            raise ValueError(f"dtype {options['dtype']!r}: one of {', '.join(DType.__members__)}")
    except (ValueError, OSError) as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    out = Path(pick(output_dir, "output_dir", "results"))
    from training_platform.tools.profile_inference import run_profile

    try:
        payload = run_profile(str(pick(model, "model", "tiny")), out, progress=progress, **options)
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        # A bad module:factory or model path, inputs that do not fit the model,
        # a CSV without its columns, no GPU for --device cuda.
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(Path(payload["files"]["report"]).read_text(encoding="utf-8"), nl=False)
    typer.echo(f"Results in {out}")
