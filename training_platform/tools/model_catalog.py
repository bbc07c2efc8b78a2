"""Named models for `gpu-check`: parameter counts, and why our figures differ from the seed's.

Counts are the published totals (embeddings included). DeepSeek-V3 is a
mixture of experts: 37B parameters are active per token (what sets the
compute), but all 671B must be resident to serve it (what sets the memory),
so both rows are listed.
"""

from __future__ import annotations

NAMED_MODELS: dict[str, float] = {
    "DeepSeek-Math-7B": 6.91e9,
    "DeepSeek-Math-70B": 70e9,
    "DeepSeek-V3 (671B total)": 671e9,  # first: a bare "DeepSeek-V3" means this one
    "DeepSeek-V3 (37B active)": 37e9,
    "Qwen2.5-0.5B": 0.49e9,
    "Qwen2.5-1.5B": 1.54e9,
    "Qwen2.5-7B": 7.62e9,
    "Llama-3-8B": 8.03e9,
    "Llama-3-70B": 70.6e9,
}
DEFAULT_MODELS = list(NAMED_MODELS)
MIXTURES_OF_EXPERTS = frozenset({"DeepSeek-V3 (671B total)", "DeepSeek-V3 (37B active)"})

# The seed layer's table (40_profile_gpu.py): 13.0 GB inference and 78.2 GB
# training for a 7B model, i.e. 7e9 x 2 and 7e9 x 12 bytes in GiB, no overhead.
SEED_DIFFERENCES = (
    "The seed table's figures (7B: 13.0 GB inference, 78.2 GB training) are "
    "7e9 x 2 and 7e9 x 12 bytes with no overhead: its training row counts fp16 "
    "weights (2) + fp16 gradients (2) + Adam's two fp32 moments (8) and leaves "
    "out the fp32 master copy of the weights (4) that mixed-precision Adam keeps, "
    "so it reads 12 B/param where the ZeRO paper's accounting is 16. Ours also "
    "adds the overhead (default +20%) for activations, KV cache, the CUDA context "
    "and fragmentation: 7B full training is 7e9 x 16 x 1.2 = 125.2 GiB "
    "(104.3 GiB with --overhead 0); inference fp16 with --overhead 0 is the seed's "
    "13.0. The seed's compatibility check printed other figures again (14.0 GB and "
    "60.0 GB for 7B) that follow from neither formula. DeepSeek-V3 needs its 671B "
    "parameters resident, not only the 37B active ones the seed listed."
)


def lookup(name: str) -> tuple[str, float] | None:
    """(canonical name, parameters) of a named model, case and punctuation ignored."""
    wanted = _key(name)
    for known, params in NAMED_MODELS.items():
        if _key(known) == wanted or _key(known.split(" (")[0]) == wanted:
            return known, params
    return None


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())
