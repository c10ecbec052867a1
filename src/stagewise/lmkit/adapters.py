"""Per-layer, per-projection and per-head access to the attention weights of Hugging Face LMs.

The one orientation of every per-head weight in :mod:`stagewise.lmkit` (TransformerLens-like,
"x @ W", x a row vector in the residual stream), whatever the family stores::

    q_h = x @ W_Q[l, h]     W_Q[l, h]: (d_model, d_head)     (W_K, W_V likewise)
    out = sum_h z_h @ W_O[l, h]                              W_O[l, h]: (d_head, d_model)

where z_h is head h's attention-weighted values. The whole matrix of a projection is the heads
side by side in the same orientation: ``matrix(model, l, "q")`` is (d_model, H * d_head) with
head h in columns ``h * d_head : (h + 1) * d_head``; ``matrix(model, l, "o")`` is
(H * d_head, d_model) with head h in those rows. The families with a fused input projection
(GPT-2, GPT-NeoX) also have ``"qkv"``: that weight as one (d_model, 3 * d_model) matrix
[Q | K | V], so that its first d_model columns are ``matrix(model, l, "q")``.

Families (one small adapter each, chosen by :func:`adapter_for`):

* ``gpt2`` (GPT2LMHeadModel, GPT2Model): ``transformer.h[l].attn.c_attn`` is a Conv1D whose
  weight is stored (in, out), y = x W + b, columns [Q | K | V]; ``attn.c_proj`` is (in, out),
  its rows grouped by head. Already in "x @ W" orientation.
* ``llama`` (LlamaForCausalLM and the same-named Mistral, Qwen2; SmolLM2 is a Llama):
  ``model.layers[l].self_attn.{q,k,v,o}_proj`` are nn.Linear with weight (out, in), so every
  matrix here is the transposed weight. Grouped-query attention: k and v have
  ``n_kv_heads`` heads and query head h reads K/V head ``h // (n_heads // n_kv_heads)``
  (:attr:`AttentionAdapter.kv_head_of`).
* ``gpt_neox`` (GPTNeoXForCausalLM, GPTNeoXModel; Pythia): ``gpt_neox.layers[l].attention``
  has one fused nn.Linear ``query_key_value``, weight W (3 * d_model, d_model), whose rows are
  grouped by head and, within a head, by projection (transformers' ``view(..., H, 3 * d_head)``
  then ``chunk(3)``)::

      W.view(H, 3, d_head, d_model)[h, t]  = head h of projection t (0 q, 1 k, 2 v), (d_head, d_model)
      W_Q[l, h] = W.view(H, 3, d_head, d_model)[h, 0].T                         (d_model, d_head)

  ``"qkv"`` is W regrouped to [Q | K | V] and transposed (a permutation of its entries: the
  same singular values, and a rank reduction of it is that of W, permuted back). ``dense`` is
  the output nn.Linear, (d_model, H * d_head). Rotary embeddings on the first ``rotary_pct``
  of each head's dims and ``use_parallel_residual`` act on activations and leave these
  matrices as they are.

Layers are 0-based indices into the HF module list. Heads of k and v index the K/V heads
(0..n_kv_heads-1). Biases are never read or written: every getter returns a weight only, and
every setter writes the weight in place (under ``torch.no_grad()``, keeping the parameter
object, its dtype and device) and leaves the bias as it was (GPT-NeoX's fused
``query_key_value.bias`` included). Getters return fresh tensors (clones) in the parameter's
dtype and device, never views of the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from stagewise.errors import UserError

HEAD_PROJECTIONS = ("q", "k", "v", "o")
"""Projections that split into heads (every family)."""

FUSED = "qkv"
"""The fused input projection (GPT-2's attn.c_attn, GPT-NeoX's query_key_value); it has no heads of its own."""

SUPPORTED = ("gpt2 (GPT2LMHeadModel, GPT2Model), llama (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, SmolLM2), "
             "gpt_neox (GPTNeoXForCausalLM, GPTNeoXModel, Pythia)")


@dataclass(frozen=True)
class AttentionAdapter:
    """Attention weight access for one model family; methods take the model as first argument.

    Attributes:
        n_layers, n_heads, n_kv_heads, d_model, d_head: the model's attention dimensions
            (n_kv_heads == n_heads without grouped-query attention).
        prefix: prefix of parameter names ("transformer." for GPT2LMHeadModel, "" for GPT2Model).

    Example::

        adapter = adapter_for(model)
        w_o = adapter.heads(model, 3, "o")          # (H, d_head, d_model): out = sum_h z_h @ w_o[h]
        adapter.set_head(model, 3, "o", 1, torch.zeros_like(w_o[1]))   # silence head 1 of layer 3
        adapter.location(3, "q", 1)                 # where head 1 of W_Q lies in the stored weight
    """

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    prefix: str

    family: ClassVar[str] = ""
    projections: ClassVar[tuple[str, ...]] = HEAD_PROJECTIONS

    # ---- family hooks -------------------------------------------------------------------
    @classmethod
    def from_model(cls, model) -> AttentionAdapter:
        """The adapter of ``model``, a model of this family (its shapes checked)."""
        raise NotImplementedError

    def _layer(self, model, layer: int) -> torch.nn.Module:
        raise NotImplementedError

    def _view(self, model, layer: int, proj: str) -> torch.Tensor:
        """The matrix in "x @ W" orientation: a view sharing the weight's storage, which the
        default :meth:`_write` copies into (a family whose layout gives no such view returns a
        gathered copy and overrides :meth:`_write`)."""
        raise NotImplementedError

    def _write(self, model, layer: int, proj: str, value: torch.Tensor, head: int | None = None) -> None:
        """Copy ``value`` (the whole matrix, or head ``head`` of shape :meth:`head_shape`) into the
        stored weight in place (cast to its dtype and device); shapes are checked by the caller."""
        view = self._view(model, layer, proj)
        if head is not None:
            cols = slice(head * self.d_head, (head + 1) * self.d_head)
            view = view[cols, :] if proj == "o" else view[:, cols]  # rows (o) or columns of head h
        with torch.no_grad():
            view.copy_(value)

    def param_name(self, layer: int, proj: str) -> str:
        """HF parameter name holding the matrix, e.g. ``transformer.h.1.attn.c_attn.weight``."""
        raise NotImplementedError

    def location(self, layer: int, proj: str, head: int | None = None) -> str:
        """Parameter name with the index of the part in the stored weight (for reports)."""
        raise NotImplementedError

    # ---- shared API ---------------------------------------------------------------------
    @property
    def kv_head_of(self) -> torch.Tensor:
        """(n_heads,) long: the K/V head each query head reads."""
        return torch.arange(self.n_heads) // (self.n_heads // self.n_kv_heads)  # (H,)

    def n_heads_of(self, proj: str) -> int:
        """Number of heads of a projection: n_kv_heads for k and v, n_heads for q and o."""
        self._check_proj(proj)
        if proj == FUSED:
            raise UserError(f"projection {FUSED!r} has no heads; select heads of q, k or v")
        return self.n_kv_heads if proj in ("k", "v") else self.n_heads

    def matrix_shape(self, proj: str) -> tuple[int, int]:
        """Shape of ``matrix(model, l, proj)``."""
        self._check_proj(proj)
        if proj == FUSED:
            return (self.d_model, 3 * self.d_model)
        width = self.n_heads_of(proj) * self.d_head
        return (width, self.d_model) if proj == "o" else (self.d_model, width)

    def head_shape(self, proj: str) -> tuple[int, int]:
        """Shape of one head: (d_model, d_head) for q, k, v; (d_head, d_model) for o."""
        self.n_heads_of(proj)
        return (self.d_head, self.d_model) if proj == "o" else (self.d_model, self.d_head)

    def matrix(self, model, layer: int, proj: str) -> torch.Tensor:
        """Whole matrix of a projection (see :func:`matrix_shape`), a fresh tensor."""
        self._check(layer, proj)
        return self._view(model, layer, proj).detach().clone()

    def set_matrix(self, model, layer: int, proj: str, value: torch.Tensor) -> None:
        """Write the whole matrix in place (cast to the parameter's dtype and device)."""
        self._check(layer, proj)
        if tuple(value.shape) != self.matrix_shape(proj):
            raise ValueError(f"{self.param_name(layer, proj)} ({proj}): expected shape {self.matrix_shape(proj)}, got {tuple(value.shape)}")
        self._write(model, layer, proj, value)

    def split_heads(self, proj: str, m: torch.Tensor) -> torch.Tensor:
        """Whole matrix -> heads: (d_model, H*d_head) -> (H, d_model, d_head); o: (H*d_head, d_model) -> (H, d_head, d_model)."""
        n = self.n_heads_of(proj)
        if proj == "o":
            return m.reshape(n, self.d_head, self.d_model)  # (H, d_head, d_model)
        return m.reshape(self.d_model, n, self.d_head).permute(1, 0, 2)  # (H, d_model, d_head)

    def merge_heads(self, proj: str, heads: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`split_heads` (exact: a permutation of entries)."""
        n = self.n_heads_of(proj)
        if tuple(heads.shape) != (n, *self.head_shape(proj)):
            raise ValueError(f"{proj} heads: expected shape {(n, *self.head_shape(proj))}, got {tuple(heads.shape)}")
        if proj == "o":
            return heads.reshape(n * self.d_head, self.d_model)  # (H*d_head, d_model)
        return heads.permute(1, 0, 2).reshape(self.d_model, n * self.d_head)  # (d_model, H*d_head)

    def heads(self, model, layer: int, proj: str) -> torch.Tensor:
        """All heads of one layer's projection: (H, d_model, d_head), o: (H, d_head, d_model)."""
        return self.split_heads(proj, self.matrix(model, layer, proj)).contiguous()

    def set_heads(self, model, layer: int, proj: str, heads: torch.Tensor) -> None:
        """Write all heads of one layer's projection (merged, then written in place)."""
        self.set_matrix(model, layer, proj, self.merge_heads(proj, heads))

    def set_head(self, model, layer: int, proj: str, head: int, value: torch.Tensor) -> None:
        """Write one head (shape :meth:`head_shape`); the other heads' entries are untouched."""
        self._check(layer, proj)
        self._check_head(proj, head)
        if tuple(value.shape) != self.head_shape(proj):
            raise ValueError(f"{proj} head {head}: expected shape {self.head_shape(proj)}, got {tuple(value.shape)}")
        self._write(model, layer, proj, value, head)

    def stacked_heads(self, model, proj: str) -> torch.Tensor:
        """Heads of every layer: (L, H, d_model, d_head), o: (L, H, d_head, d_model)."""
        return torch.stack([self.heads(model, layer, proj) for layer in range(self.n_layers)])  # (L, H, ., .)

    # ---- checks -------------------------------------------------------------------------
    def _check_proj(self, proj: str) -> None:
        if proj not in self.projections:
            raise UserError(f"unknown projection {proj!r} for a {self.family} model; allowed: {', '.join(self.projections)}")

    def _check(self, layer: int, proj: str) -> None:
        self._check_proj(proj)
        if not 0 <= layer < self.n_layers:
            raise UserError(f"layer {layer} out of range: this {self.family} model has layers 0..{self.n_layers - 1}")

    def _check_head(self, proj: str, head: int) -> None:
        n = self.n_heads_of(proj)
        if not 0 <= head < n:
            kind = "K/V heads" if proj in ("k", "v") else "heads"
            raise UserError(f"head {head} out of range for {proj}: this {self.family} model has {n} {kind} (0..{n - 1})")


@dataclass(frozen=True)
class GPT2Adapter(AttentionAdapter):
    """GPT-2: fused Conv1D c_attn (d_model, 3 d_model) = [Q | K | V] and c_proj, both (in, out)."""

    family: ClassVar[str] = "gpt2"
    projections: ClassVar[tuple[str, ...]] = (*HEAD_PROJECTIONS, FUSED)
    _OFFSET: ClassVar[dict[str, int]] = {"q": 0, "k": 1, "v": 2}

    @classmethod
    def from_model(cls, model) -> "GPT2Adapter":
        base = model.base_model
        attn = base.h[0].attn
        d_model, n_heads = attn.embed_dim, attn.num_heads
        adapter = cls(len(base.h), n_heads, n_heads, d_model, attn.head_dim, _prefix(model))
        _check_shapes(adapter, model)
        return adapter

    def _layer(self, model, layer):
        return model.base_model.h[layer].attn

    def _view(self, model, layer, proj):
        attn = self._layer(model, layer)
        if proj == "o":
            return attn.c_proj.weight  # (H*d_head, d_model), already x @ W
        if proj == FUSED:
            return attn.c_attn.weight  # (d_model, 3 d_model)
        start = self._OFFSET[proj] * self.d_model
        return attn.c_attn.weight[:, start:start + self.d_model]  # (d_model, d_model) view

    def param_name(self, layer, proj):
        self._check(layer, proj)
        module = "c_proj" if proj == "o" else "c_attn"
        return f"{self.prefix}h.{layer}.attn.{module}.weight"

    def location(self, layer, proj, head=None):
        name = self.param_name(layer, proj)
        if proj == FUSED and head is None:
            return name
        lo = 0 if proj == "o" else self._OFFSET[proj] * self.d_model
        width = self.d_model
        if head is not None:
            self._check_head(proj, head)
            lo, width = lo + head * self.d_head, self.d_head
        if proj == "o":
            return name if head is None else f"{name}[{lo}:{lo + width}, :]"
        return f"{name}[:, {lo}:{lo + width}]"


@dataclass(frozen=True)
class LlamaAdapter(AttentionAdapter):
    """Llama-style: separate nn.Linear q/k/v/o_proj, weight (out, in); grouped-query K/V."""

    family: ClassVar[str] = "llama"

    @classmethod
    def from_model(cls, model) -> "LlamaAdapter":
        base, cfg = model.base_model, model.config
        attn = base.layers[0].self_attn
        adapter = cls(len(base.layers), cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size,
                      attn.head_dim, _prefix(model))
        if adapter.n_heads % adapter.n_kv_heads:
            raise UserError(f"{type(model).__name__}: {adapter.n_heads} query heads are not a multiple of {adapter.n_kv_heads} K/V heads")
        _check_shapes(adapter, model)
        return adapter

    def _layer(self, model, layer):
        return model.base_model.layers[layer].self_attn

    def _view(self, model, layer, proj):
        return getattr(self._layer(model, layer), f"{proj}_proj").weight.T  # (in, out) view

    def param_name(self, layer, proj):
        self._check(layer, proj)
        return f"{self.prefix}layers.{layer}.self_attn.{proj}_proj.weight"

    def location(self, layer, proj, head=None):
        name = self.param_name(layer, proj)
        if head is None:
            return name
        self._check_head(proj, head)
        lo, hi = head * self.d_head, (head + 1) * self.d_head
        return f"{name}[:, {lo}:{hi}]" if proj == "o" else f"{name}[{lo}:{hi}, :]"


@dataclass(frozen=True)
class GPTNeoXAdapter(AttentionAdapter):
    """GPT-NeoX (Pythia): fused nn.Linear query_key_value (3 d_model, d_model), rows per head
    [q_h; k_h; v_h], and nn.Linear dense (d_model, H d_head); both weights stored (out, in)."""

    family: ClassVar[str] = "gpt_neox"
    projections: ClassVar[tuple[str, ...]] = (*HEAD_PROJECTIONS, FUSED)
    _PART: ClassVar[dict[str, int]] = {"q": 0, "k": 1, "v": 2}

    @classmethod
    def from_model(cls, model) -> "GPTNeoXAdapter":
        base, cfg = model.base_model, model.config
        adapter = cls(len(base.layers), cfg.num_attention_heads, cfg.num_attention_heads, cfg.hidden_size,
                      base.layers[0].attention.head_size, _prefix(model))
        stored = {"qkv": (3 * adapter.n_heads * adapter.d_head, adapter.d_model), "o": (adapter.d_model, adapter.n_heads * adapter.d_head)}
        for layer in range(adapter.n_layers):  # the stored (out, in) weights; every view below follows from them
            for proj, shape in stored.items():
                got = tuple(adapter._weight(model, layer, proj).shape)
                if got != shape:
                    raise UserError(f"{type(model).__name__}: {adapter.param_name(layer, proj)} has shape {got}, "
                                    f"expected {shape} for a {adapter.family} model")
        return adapter

    def _layer(self, model, layer):
        return model.base_model.layers[layer].attention

    def _weight(self, model, layer: int, proj: str) -> torch.Tensor:
        """The stored parameter: query_key_value.weight (3 H d_head, d_model) or dense.weight (d_model, H d_head)."""
        attn = self._layer(model, layer)
        return attn.dense.weight if proj == "o" else attn.query_key_value.weight

    def _parts(self, model, layer: int) -> torch.Tensor:
        """(H, 3, d_head, d_model) view of query_key_value.weight: [h, t] is head h of q, k, v (t = 0, 1, 2)."""
        return self._weight(model, layer, FUSED).view(self.n_heads, 3, self.d_head, self.d_model)  # (H, 3, d_head, d_model)

    def _view(self, model, layer, proj):
        if proj == "o":
            return self._weight(model, layer, proj).T  # (H*d_head, d_model) view
        parts = self._parts(model, layer)  # (H, 3, d_head, d_model)
        if proj == FUSED:  # gathered copy: [Q | K | V]
            return parts.transpose(0, 1).reshape(3 * self.d_model, self.d_model).T  # (d_model, 3 d_model)
        return parts[:, self._PART[proj]].reshape(self.n_heads * self.d_head, self.d_model).T  # (d_model, H*d_head) copy

    def _write(self, model, layer, proj, value, head=None):
        if proj == "o":
            super()._write(model, layer, proj, value, head)
            return
        parts = self._parts(model, layer)  # (H, 3, d_head, d_model) view
        if proj == FUSED:
            target, rows = parts.transpose(0, 1), value.T.reshape(3, self.n_heads, self.d_head, self.d_model)  # (3, H, d_head, d_model)
        elif head is None:
            target, rows = parts[:, self._PART[proj]], value.T.reshape(self.n_heads, self.d_head, self.d_model)  # (H, d_head, d_model)
        else:
            target, rows = parts[head, self._PART[proj]], value.T  # (d_head, d_model)
        with torch.no_grad():
            target.copy_(rows)

    def param_name(self, layer, proj):
        self._check(layer, proj)
        module = "dense" if proj == "o" else "query_key_value"
        return f"{self.prefix}layers.{layer}.attention.{module}.weight"

    def location(self, layer, proj, head=None):
        name = self.param_name(layer, proj)
        if head is None:
            if proj in ("o", FUSED):
                return name
            return f"{name}.view({self.n_heads}, 3, {self.d_head}, {self.d_model})[:, {self._PART[proj]}]"
        self._check_head(proj, head)
        if proj == "o":
            lo = head * self.d_head
            return f"{name}[:, {lo}:{lo + self.d_head}]"
        lo = (3 * head + self._PART[proj]) * self.d_head
        return f"{name}[{lo}:{lo + self.d_head}, :]"


_FAMILIES: dict[str, type[AttentionAdapter]] = {
    "gpt2": GPT2Adapter,
    "llama": LlamaAdapter,
    "mistral": LlamaAdapter,
    "qwen2": LlamaAdapter,
    "gpt_neox": GPTNeoXAdapter,
}


def _prefix(model) -> str:
    return "" if model.base_model is model else f"{model.base_model_prefix}."


def _check_shapes(adapter: AttentionAdapter, model) -> None:
    """Every layer's weights have the shapes the dimensions imply (else the family is not ours)."""
    for layer in range(adapter.n_layers):
        for proj in adapter.projections:
            got = tuple(adapter._view(model, layer, proj).shape)
            if got != adapter.matrix_shape(proj):
                raise UserError(f"{type(model).__name__}: {adapter.param_name(layer, proj)} has shape {got} in x @ W orientation, "
                                f"expected {adapter.matrix_shape(proj)} for a {adapter.family} model")


def adapter_for(model) -> AttentionAdapter:
    """The adapter of a model's family (by ``model.config.model_type``).

    Example::

        adapter = adapter_for(model)                # GPT2Adapter, LlamaAdapter or GPTNeoXAdapter
        adapter.heads(model, 0, "q").shape          # (n_heads, d_model, d_head)
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    family = _FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise UserError(f"no attention adapter for {type(model).__name__} (model_type={model_type!r}); supported families: {SUPPORTED}")
    return family.from_model(model)
