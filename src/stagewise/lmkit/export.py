"""Write a loaded model as a Hugging Face folder (the output of ``stagewise lm reduce``):
safetensors weights, ``config.json`` and the tokenizer's files, loadable with
``AutoModelForCausalLM.from_pretrained(folder)`` / ``AutoTokenizer.from_pretrained(folder)``.

Two kinds of model need more than ``save_pretrained``:

* **GGUF** (e.g. SmolLM2's Q4_1 file): transformers unpacks every weight into a dense float
  tensor at load, but leaves its GGUF quantizer attached (``model.hf_quantizer``, whose
  ``is_serializable()`` is always False) and ``config.quantization_config`` (the GGUF file's
  name) in the config, so ``save_pretrained`` refuses the model ("quantized with gguf and is
  not serializable"). :func:`release_gguf` drops both, as transformers' own ``dequantize()``
  ends, leaving the dense model it already was; the folder holds the dequantised float
  weights. Weights that transformers keeps packed in GGUF blocks (its ``kernels`` path) are
  refused in one line before any work.

* **Compact vocabulary** (``model.compact_vocab``: V' rows for the original ids
  ``vocab_ids`` (V',)): written as a full-vocabulary GPT-2 of V = len(tokenizer) rows that
  gives the same logits on the kept ids and a logit L below every kept logit, for every input,
  on every other id. With h = gamma * z + beta the final LayerNorm's output (d,), where
  z = (x - mean x) / sqrt(var x + eps) has sum_i z_i = 0 and ||z|| <= sqrt(d), and w_k (d,)
  the compact output row k (logit c_k = h . w_k)::

      wte'[vocab_ids[k]]     = wte[k]                          input rows of the kept ids, copied
      wte'[j]                = 0                               every other id j
      ln_f': gamma' = 1, beta' = 1                             so h' = z + 1
      lm_head'[vocab_ids[k]] = gamma * w_k + a_k 1,  a_k = (beta . w_k - sum_i gamma_i w_ki) / d
                                                               h' . w'_k = z . (gamma * w_k) + beta . w_k = c_k
      lm_head'[j]            = (L / d) 1                       h' . w'_j = (L / d) sum_i z_i + L = L
      L = -(B + OTHER_LOGIT_GAP),  B = max_k sqrt(d) ||gamma * w_k - mean(gamma * w_k) 1|| + |beta . w_k|

  B bounds every |c_k| for every input, so each other id's logit is at least
  :data:`OTHER_LOGIT_GAP` below the largest kept logit: its softmax probability
  exp(-OTHER_LOGIT_GAP) is exactly 0 in float32 (and float64), the full softmax equals the
  compact one on the kept ids, and the argmax over the full vocabulary is always a kept id.
  The output matrix is untied from the input embedding (``tie_word_embeddings=false``); the
  final LayerNorm is folded into it, so the last hidden state (after ``ln_f``) reads z + 1.
  Kept-id logits equal the compact model's up to float32 round-off (checked on a probe batch
  before anything is written: :data:`KEPT_LOGIT_RTOL`, :data:`KEPT_LOGIT_ATOL`). Needs a
  LayerNorm (mean-free) final norm: GPT-2; an RMSNorm model (Llama, SmolLM2) has no
  input-independent direction, so its compact form is refused in one line.
"""

from __future__ import annotations

import copy
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from ..errors import UserError
from .models import LoadedModel, _quiet

OTHER_LOGIT_GAP = 1000.0
"""Logit margin of the ids outside a compact vocabulary below every kept logit: exp(-1000)
underflows to exactly 0 in float32 and float64 (below about -104 and -745 it does)."""

KEPT_LOGIT_RTOL = 1e-5
KEPT_LOGIT_ATOL = 1e-4
"""Kept-id logits of a full-vocabulary export vs the compact model differ by float32 round-off
of the folded LayerNorm: at most KEPT_LOGIT_ATOL + KEPT_LOGIT_RTOL * B (B the bound on the kept
logits); checked on a probe batch before anything is written."""

PROBE_SHAPE = (2, 8)
"""(batch, positions) of the seeded probe batch of kept ids (positions capped at n_positions)."""

GGUF = "gguf"


@dataclass(frozen=True)
class Export:
    """What :func:`export_hf` wrote.

    Attributes:
        out: the folder.
        vocab_size: V, rows of the written embedding and output matrices.
        kept_ids: V' of a compact model written as the full vocabulary, else None.
        other_logit: L, the logit of every other id for every input (compact), else None.
        kept_logit_error: max |logit difference| on the kept ids over the probe batch (compact), else None.
        gguf_dequantized: the model came from a GGUF file; the folder holds its dequantised weights.
    """

    out: Path
    vocab_size: int
    kept_ids: int | None = None
    other_logit: float | None = None
    kept_logit_error: float | None = None
    gguf_dequantized: bool = False

    def describe(self) -> str:
        """One line for the CLI: what the folder is."""
        parts = []
        if self.kept_ids is not None:
            parts.append(f"compact vocabulary written as the full vocabulary ({self.vocab_size} ids, {self.kept_ids} "
                         "kept): every other id has input-embedding row 0 and output row (L/d)*ones in the untied "
                         f"lm_head (final LayerNorm folded in), so logit L = {self.other_logit:.6g} for every input and "
                         f"probability exactly 0; kept-id logits equal the run's within {self.kept_logit_error:.2g}")
        if self.gguf_dequantized:
            parts.append("GGUF weights written dequantised (float, safetensors), no quantization_config")
        return "; ".join(parts)


def _packed_parameters(model: Any) -> list[str]:
    """Names of parameters that are not floating point (weights kept in quantized blocks)."""
    return [name for name, p in model.named_parameters() if not p.is_floating_point()]


def _quant_method(model: Any) -> str | None:
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return None
    method = quantizer.quantization_config.quant_method
    return str(getattr(method, "value", method))


def _final_layernorm(model: Any) -> torch.nn.LayerNorm | None:
    """GPT-2's ``transformer.ln_f`` (a mean-free LayerNorm with weight and bias), else None."""
    norm = getattr(getattr(model, "transformer", None), "ln_f", None)
    if getattr(model.config, "model_type", None) != "gpt2" or not isinstance(norm, torch.nn.LayerNorm):
        return None
    return norm if norm.weight is not None and norm.bias is not None else None


def check_exportable(loaded: LoadedModel) -> None:
    """One-line UserError, before any work, unless :func:`export_hf` can write ``loaded``.

    Example::

        check_exportable(loaded)                    # UserError, before any work, when export_hf cannot write it
    """
    model = loaded.model
    method = _quant_method(model)
    if method is not None:
        packed = _packed_parameters(model)
        if packed:
            raise UserError(f"{loaded.name}: {len(packed)} weights are kept packed in {method} blocks (e.g. {packed[0]}), "
                            "which a Hugging Face folder cannot hold as dense weights; load the model dequantised "
                            "(without the kernels package) to write it")
        if method != GGUF and not model.hf_quantizer.is_serializable():
            raise UserError(f"{loaded.name}: quantized with {method}, which transformers cannot save; "
                            "load it unquantized to write it")
    if loaded.vocab_ids is None:
        return
    ids, rows = loaded.vocab_ids, loaded.vocab_size
    if ids.ndim != 1 or len(ids) != rows or len(torch.unique(ids)) != rows or int(ids.min()) < 0:
        raise UserError(f"{loaded.name}: vocab_ids ({tuple(ids.shape)}) are not {rows} distinct ids >= 0, one per row")
    out = model.get_output_embeddings()
    if _final_layernorm(model) is None or out is None or getattr(out, "bias", None) is not None:
        raise UserError(f"{loaded.name}: a compact vocabulary of {type(model).__name__} cannot be written as the full "
                        "vocabulary (that needs GPT-2's final LayerNorm, whose mean-free output gives every dropped id "
                        "one constant logit; this final norm has no such direction); rank-curve works on it directly")


def release_gguf(model: Any) -> bool:
    """Drop the GGUF quantizer and ``config.quantization_config`` that transformers leaves on a
    model it loaded from a GGUF file with every weight unpacked (dense float), in place; True
    when there was one. What remains is the dense model it already was (the last step of
    transformers' ``dequantize()``), which ``save_pretrained`` writes.

    Example::

        release_gguf(loaded.model)                  # True for a model loaded from a GGUF file
    """
    if _quant_method(model) != GGUF:
        return False
    if _packed_parameters(model):
        raise UserError("a GGUF model with weights kept packed cannot be written dense (see check_exportable)")
    model.hf_quantizer.remove_quantization_config(model)
    return True


def full_vocab_model(model: Any, vocab_ids: torch.Tensor, vocab_size: int) -> tuple[Any, float]:
    """A new GPT-2 with ``vocab_size`` (V) rows equivalent to the compact ``model`` (V' rows for
    the original ids ``vocab_ids`` (V',)) on the kept ids, and (the model, L): the rows of the
    module docstring. ``model`` is not changed.

    Example::

        full, other_logit = full_vocab_model(loaded.model, loaded.vocab_ids, len(loaded.tokenizer))
    """
    norm = _final_layernorm(model)
    assert norm is not None, "check_exportable first"
    ids = vocab_ids.to(torch.long)
    emb = model.get_input_embeddings().weight.detach().double()  # (V', d)
    w = model.get_output_embeddings().weight.detach().double()  # (V', d)
    gamma, beta = norm.weight.detach().double(), norm.bias.detach().double()  # (d,), (d,)
    d = w.shape[1]
    scaled = w * gamma  # (V', d): gamma * w_k
    centred = scaled - scaled.mean(dim=1, keepdim=True)  # (V', d)
    bias_term = w @ beta  # (V',): beta . w_k
    bound = float((d ** 0.5 * centred.norm(dim=1) + bias_term.abs()).max())  # B >= |c_k| for every input
    other_logit = -(bound + OTHER_LOGIT_GAP)  # L
    head = torch.full((vocab_size, d), other_logit / d, dtype=torch.float64)  # (V, d): other rows (L/d) 1
    head[ids] = scaled + ((bias_term - scaled.sum(dim=1)) / d)[:, None]  # (V', d): gamma * w_k + a_k 1
    wte = torch.zeros(vocab_size, d, dtype=torch.float64)  # (V, d): other rows 0
    wte[ids] = emb

    config = copy.deepcopy(model.config)
    config.vocab_size = vocab_size
    config.tie_word_embeddings = False
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):  # compact rows -> original ids
        value = getattr(config, name, None)
        if isinstance(value, int) and 0 <= value < len(ids):
            setattr(config, name, int(ids[value]))
    dtype = model.get_input_embeddings().weight.dtype
    state = dict(model.state_dict())
    state["transformer.wte.weight"] = wte.to(dtype)
    state["lm_head.weight"] = head.to(dtype)
    state["transformer.ln_f.weight"] = torch.ones_like(norm.weight)
    state["transformer.ln_f.bias"] = torch.ones_like(norm.bias)
    with torch.random.fork_rng(devices=[]):  # the constructor's random init is overwritten; the caller's RNG is untouched
        full = type(model)(config).to(dtype)
    full.load_state_dict(state, strict=True)
    return full.eval(), other_logit


def probe_kept_logits(compact: Any, full: Any, vocab_ids: torch.Tensor, seed: int = 0) -> tuple[float, float]:
    """(max |full - compact| logit on the kept ids, softmax mass of the other ids) on a seeded
    probe batch of kept ids (:data:`PROBE_SHAPE`).

    Example::

        error, mass = probe_kept_logits(loaded.model, full, loaded.vocab_ids)   # mass == 0.0
    """
    n_pos = int(getattr(compact.config, "n_positions", PROBE_SHAPE[1]))
    rows = torch.randint(len(vocab_ids), (PROBE_SHAPE[0], min(PROBE_SHAPE[1], n_pos)),
                         generator=torch.Generator().manual_seed(seed))  # (B, T) compact rows
    was_training = compact.training
    compact.eval()
    try:
        with torch.no_grad():
            small = compact(input_ids=rows).logits.float()  # (B, T, V')
            large = full(input_ids=vocab_ids[rows]).logits.float()  # (B, T, V)
    finally:
        compact.train(was_training)
    error = float((large[..., vocab_ids] - small).abs().max())
    other = torch.ones(large.shape[-1], dtype=torch.bool)
    other[vocab_ids] = False
    mass = float(torch.softmax(large, dim=-1)[..., other].sum(dim=-1).max())
    return error, mass


def export_hf(loaded: LoadedModel, out: Path, extra_files: dict[str, str] | None = None) -> Export:
    """Write ``loaded`` as a Hugging Face folder at ``out`` (absent or an empty folder): the
    model in safetensors (a GGUF model dequantised, a compact vocabulary as the full one: see
    the module docstring), the tokenizer and ``extra_files`` (name -> text, e.g. the
    reduction table). Written into a sibling folder and renamed, so a failure (a full disk, a
    read-only folder, Ctrl-C) leaves nothing; one-line UserError for what cannot be written.
    A GGUF model loses its (inert) quantizer in place (:func:`release_gguf`).

    Example::

        written = export_hf(loaded, Path("gpt2-reduced"))
        AutoModelForCausalLM.from_pretrained("gpt2-reduced")   # the edited model, reloaded
    """
    check_exportable(loaded)
    model, kept, other_logit, error = loaded.model, None, None, None
    if loaded.vocab_ids is not None:
        ids = loaded.vocab_ids.to(torch.long)
        vocab_size = max(len(loaded.tokenizer), int(ids.max()) + 1)
        model, other_logit = full_vocab_model(loaded.model, ids, vocab_size)
        error, mass = probe_kept_logits(loaded.model, model, ids)
        bound = -other_logit - OTHER_LOGIT_GAP  # B
        if error > KEPT_LOGIT_ATOL + KEPT_LOGIT_RTOL * bound or mass != 0.0:
            raise RuntimeError(f"full-vocabulary export is not equivalent: kept-logit error {error:.3g}, other mass {mass:.3g}")
        kept = len(ids)
    gguf = release_gguf(model)
    made = [p for p in [out.parent, *out.parent.parents] if not p.exists()]  # folders this call creates
    emptied = out.is_dir()
    staging = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.parent / f".{out.name}.{secrets.token_hex(4)}.partial"
        staging.mkdir()
        with _quiet():  # transformers' progress bar
            model.save_pretrained(staging)
            loaded.tokenizer.save_pretrained(staging)
        for name, text in (extra_files or {}).items():
            (staging / name).write_text(text, encoding="utf-8")
        if emptied:
            out.rmdir()  # empty (the caller checked); a folder that filled meanwhile stops here
        os.replace(staging, out)
    except (OSError, ValueError, SafetensorError) as err:
        _undo(staging, out if emptied else None, made)
        if isinstance(err, OSError):
            raise UserError(f"--out {out}: cannot write the model ({err.strerror or err}); nothing was written") from None
        if isinstance(err, SafetensorError):  # safetensors' writer reports a full disk or a closed folder as its own error
            why = str(err).splitlines()[0].removeprefix("Error while serializing: ")[:200]
            raise UserError(f"--out {out}: cannot write the model ({why}); nothing was written") from None
        raise UserError(f"{loaded.name}: transformers cannot save this model ({str(err).splitlines()[0][:200]})") from None
    except BaseException:
        _undo(staging, out if emptied else None, made)
        raise
    return Export(out=out, vocab_size=int(model.get_input_embeddings().weight.shape[0]), kept_ids=kept,
                  other_logit=other_logit, kept_logit_error=error, gguf_dequantized=gguf)


def _undo(staging: Path | None, emptied: Path | None, made: list[Path]) -> None:
    """Remove what a failed :func:`export_hf` made: the staging folder, the folders it created
    (deepest first, when still empty); put back the empty ``--out`` folder it removed."""
    if staging is not None and staging.exists():
        shutil.rmtree(staging, ignore_errors=True)
    if emptied is not None and not emptied.exists():
        emptied.mkdir()
    for folder in made:  # made[0] is the deepest
        try:
            folder.rmdir()
        except OSError:
            break
