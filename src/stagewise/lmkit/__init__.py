"""lmkit: the model-weights toolkit of stagewise, usable without any run.

Load a Hugging Face causal LM (a hub id, a local folder, a GGUF file or a seeded random
``tiny-gpt2``), read and write its attention weights per head, take the singular values of
every head, reduce the rank of chosen matrices or heads, write the edited model back as a
Hugging Face folder, and score sentences and BLiMP minimal pairs::

    import torch
    from stagewise.lmkit import ModelConfig, adapter_for, attention_spectra, build, reduce_rank

    loaded = build(ModelConfig(name="path/to/hf-folder"), seed=0, dtype=torch.float32)
    adapter = adapter_for(loaded.model)
    w_q = adapter.heads(loaded.model, 0, "q")              # (H, d_model, d_head)
    spectra = attention_spectra(adapter, loaded.model)     # spectra.sv["qk"]: (L, H, r)
    reduce_rank(loaded.model, "blocks.0.attn.q.head.1", p=0.5)

The tutorial is docs/lmkit.md.

**One orientation for per-head weights** ("x @ W", TransformerLens-like; x a row vector in the
residual stream), whatever the family stores::

    q_h = x @ W_Q[l, h]          W_Q[l, h], W_K[l, h], W_V[l, h]: (d_model, d_head)
    out = sum_h z_h @ W_O[l, h]  W_O[l, h]:                       (d_head, d_model)

GPT-2's Conv1D weights are stored that way; Llama-style ``nn.Linear`` weights (out, in) are
transposed by the adapter, and GPT-NeoX's (Pythia's) fused ``query_key_value`` is split per
head and transposed. Layers are 0-based indices of the HF module list; on
grouped-query models k and v heads are the K/V heads (:mod:`.adapters`).

Modules: :mod:`.config` (which model), :mod:`.models` (loading, compact vocabulary),
:mod:`.extra` (the ``lm`` extra's packages, named in one line when missing),
:mod:`.weightfiles` (safetensors or GGUF only; a GGUF file's layout checked before parsing),
:mod:`.hub` (can a hub id be had, decided at once), :mod:`.adapters` (per-head weights),
:mod:`.spectra`, :mod:`.selectors` (which matrices or heads), :mod:`.surgery` (rank
reduction), :mod:`.export` (a Hugging Face folder), :mod:`.scoring` (log-probabilities of
texts), :mod:`.blimp`, :mod:`.readers` (bounded data-file readers). The layer sits beside
``measure`` and ``report``, below the labs: it imports none. The names load on first use
(PEP 562), so importing the package (or its :class:`ModelConfig`) imports no torch or
transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .adapters import FUSED, HEAD_PROJECTIONS, AttentionAdapter, GPT2Adapter, GPTNeoXAdapter, LlamaAdapter, adapter_for
    from .blimp import BlimpResult, blimp_accuracy, read_blimp_pairs, score_blimp, write_blimp
    from .config import TINY, ModelConfig, TinyModel
    from .export import Export, check_exportable, export_hf
    from .extra import missing_lm_packages, require_lm_extra
    from .hub import hub_unreachable, local_files_only, require_hub_repo
    from .models import GPT2_VOCAB, LoadedModel, build, check_model, compact_model, gpt2_bpe, load_pretrained, load_tokenizer, tiny_gpt2
    from .readers import read_json, read_json_or_jsonl, read_jsonl, read_sick, read_text
    from .scoring import prefix_token_id, sequence_logprobs, token_sequence_logprobs
    from .spectra import AttentionSpectra, attention_spectra, head_singular_values, qk_singular_values, spectra_hook, spectra_table
    from .selectors import Target, parse_selector
    from .surgery import RankReducer, ReducedMatrix, Reduction, kept_rank, low_rank, reduce_rank
    from .weightfiles import check_gguf, check_weight_folder

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("FUSED", "HEAD_PROJECTIONS", "AttentionAdapter", "GPT2Adapter", "GPTNeoXAdapter", "LlamaAdapter", "adapter_for"),
                   ".adapters"),
    **dict.fromkeys(("BlimpResult", "blimp_accuracy", "read_blimp_pairs", "score_blimp", "write_blimp"), ".blimp"),
    **dict.fromkeys(("TINY", "ModelConfig", "TinyModel"), ".config"),
    **dict.fromkeys(("Export", "check_exportable", "export_hf"), ".export"),
    **dict.fromkeys(("missing_lm_packages", "require_lm_extra"), ".extra"),
    **dict.fromkeys(("hub_unreachable", "local_files_only", "require_hub_repo"), ".hub"),
    **dict.fromkeys(("GPT2_VOCAB", "LoadedModel", "build", "check_model", "compact_model", "gpt2_bpe", "load_pretrained",
                     "load_tokenizer", "tiny_gpt2"), ".models"),
    **dict.fromkeys(("read_json", "read_json_or_jsonl", "read_jsonl", "read_sick", "read_text"), ".readers"),
    **dict.fromkeys(("prefix_token_id", "sequence_logprobs", "token_sequence_logprobs"), ".scoring"),
    **dict.fromkeys(("AttentionSpectra", "attention_spectra", "head_singular_values", "qk_singular_values", "spectra_hook",
                     "spectra_table"), ".spectra"),
    **dict.fromkeys(("Target", "parse_selector"), ".selectors"),
    **dict.fromkeys(("RankReducer", "ReducedMatrix", "Reduction", "kept_rank", "low_rank", "reduce_rank"), ".surgery"),
    **dict.fromkeys(("check_gguf", "check_weight_folder"), ".weightfiles"),
}

__all__ = [
    "AttentionAdapter", "AttentionSpectra", "BlimpResult", "Export", "FUSED", "GPT2Adapter", "GPT2_VOCAB", "GPTNeoXAdapter",
    "HEAD_PROJECTIONS", "LlamaAdapter", "LoadedModel", "ModelConfig", "RankReducer", "ReducedMatrix", "Reduction", "TINY", "Target",
    "TinyModel", "adapter_for",
    "attention_spectra", "blimp_accuracy", "build", "check_exportable", "check_gguf", "check_model", "check_weight_folder",
    "compact_model", "export_hf", "gpt2_bpe", "head_singular_values", "hub_unreachable", "kept_rank", "load_pretrained",
    "load_tokenizer", "local_files_only", "low_rank", "missing_lm_packages", "parse_selector", "prefix_token_id",
    "qk_singular_values", "read_blimp_pairs", "read_json", "read_json_or_jsonl", "read_jsonl", "read_sick", "read_text",
    "reduce_rank", "require_hub_repo", "require_lm_extra", "score_blimp", "sequence_logprobs", "spectra_hook", "spectra_table",
    "tiny_gpt2", "token_sequence_logprobs", "write_blimp",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
