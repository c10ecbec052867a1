"""Memory and disk estimate of an LM-lab run (what the runner refuses on)."""

from __future__ import annotations

import json
from pathlib import Path

from ..contract import Resources
from .config import Config
from .models import GPT2_VOCAB, PKG, is_tiny, package_folder

BYTES_PER_PARAM_TRAIN = 4 * 4  # fp32 weights, gradients and AdamW's two moments
GGUF_EXPANSION = 8  # a 4-bit GGUF file de-quantized to float32 (32 / 4 bits)
ROW_BYTES = 80  # a predictions row without its top-k lists (ids, strings, numbers)
ACTIVATION_FACTOR = 16  # bytes per (token x d_model x layer) of activations kept for backward


def tiny_params(config: Config) -> tuple[int, int, int]:
    """(parameters, d_model, layers) of tiny-gpt2 (full vocabulary: the upper bound)."""
    t = config.model.tiny
    per_block = 12 * t.n_embd ** 2 + 13 * t.n_embd
    return GPT2_VOCAB * t.n_embd + t.n_positions * t.n_embd + t.n_layer * per_block + 2 * t.n_embd, t.n_embd, t.n_layer


def _folder_bytes(config: Config) -> int | None:
    name = config.model.name
    try:
        folder = package_folder(name[len(PKG):]) if name.startswith(PKG) else Path(name)
    except Exception:
        return None
    if config.model.gguf_file is not None:
        f = Path(config.model.gguf_file)
        path = f if f.is_file() else folder / f
        return path.stat().st_size * GGUF_EXPANSION if path.is_file() else None
    if not folder.is_dir():
        return None
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or None


def estimate(config: Config) -> Resources:
    """Training state (4 copies of the weights), activations of one batch, records and snapshots."""
    t = config.train
    if is_tiny(config.model):
        params, d, layers = tiny_params(config)
        weight_bytes = params * 4
        width = config.model.tiny.n_positions
    else:
        weight_bytes = _folder_bytes(config)
        if weight_bytes is None:
            return Resources(0, 0, f"no estimate for {config.model.name} (a hub model: its size is known after download)")
        d, layers, width = 1024, 24, 128
        cfg = Path(config.model.name) / "config.json"
        if cfg.is_file():
            raw = json.loads(cfg.read_text())
            d, layers = raw.get("hidden_size", raw.get("n_embd", d)), raw.get("num_hidden_layers", raw.get("n_layer", layers))
    memory = weight_bytes // 4 * BYTES_PER_PARAM_TRAIN + t.batch_size * width * d * layers * ACTIVATION_FACTOR
    records = 60_000 * (t.epochs + 1) * (ROW_BYTES + 12 * t.top_k)  # at most ~60k examples (all of BLiMP)
    snapshots = weight_bytes * (len(t.snapshot_epochs) + 1) + 2 * weight_bytes * 3
    return Resources(int(memory), int(records + snapshots),
                     f"weights {weight_bytes / 2**20:.0f} MiB; training state x4; records for {t.epochs + 1} epochs")
