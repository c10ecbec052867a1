"""Selectors: which attention matrices or heads of a model an edit or a measurement addresses.

Selector grammar (the project's metric-name grammar; layers are 0-based indices of the HF
module list, ``transformer.h`` / ``model.layers``)::

    selectors := selector ("," selector)*            top-level commas join selectors
    selector  := "blocks." set ".attn" ["." projs ["." "head." set]]
    set       := "*" | item | "{" item ("," item)* "}"     item := N | N-M  (inclusive)
    projs     := P | "{" P ("," P)* "}"                    P in q, k, v, o, qkv

Examples: ``blocks.1.attn.q.head.0``, ``blocks.1-6.attn.{qkv,o}``, ``blocks.{0,3}.attn``,
``blocks.1-6.attn.{q,k}.head.0-3``. Without ``.head`` a projection means its whole matrix;
``blocks.L.attn`` alone means q, k, v and o, each whole. ``qkv`` is the fused input
projection, d_model x 3 d_model, truncated as one block as the paper's authors did: GPT-2's
c_attn, or GPT-NeoX's query_key_value (its rows regrouped to [Q | K | V], which changes no
singular value); Llama-style families have no fused matrix. For k and v on grouped-query
models the head index is the K/V head (0..n_kv_heads-1). Duplicate targets are merged; a whole matrix and some of its heads (or
qkv and q/k/v of one layer) in one selection are ambiguous and rejected.

:func:`parse_selector` turns a selectors string into sorted :class:`Target` values for one
model (its :class:`~stagewise.lmkit.adapters.AttentionAdapter`); errors are one line naming
the string and the position.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from stagewise.errors import UserError
from stagewise.lmkit.adapters import FUSED, HEAD_PROJECTIONS, AttentionAdapter

_PROJ_ORDER = {p: i for i, p in enumerate((*HEAD_PROJECTIONS, FUSED))}
_COVERS = {"q": ("q",), "k": ("k",), "v": ("v",), "o": ("o",), FUSED: ("q", "k", "v")}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\S))")
_GRAMMAR = "blocks.L.attn[.P[.head.H]] with L, H an index N, a range N-M, * or {a,b-c}, P in q,k,v,o,qkv or {q,k}"


@dataclass(frozen=True)
class Target:
    """One matrix (head None) or one head of one layer's projection."""

    layer: int
    proj: str
    head: int | None = None

    @property
    def name(self) -> str:
        """``blocks.{layer}.attn.{proj}`` or ``blocks.{layer}.attn.{proj}.head.{head}``."""
        base = f"blocks.{self.layer}.attn.{self.proj}"
        return base if self.head is None else f"{base}.head.{self.head}"

    def sort_key(self) -> tuple[int, int, int]:
        return (self.layer, _PROJ_ORDER[self.proj], -1 if self.head is None else self.head)


# ---- parsing --------------------------------------------------------------------------------
class _Parser:
    """Recursive descent over one selectors string; errors name the string and the position."""

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, int, int]] = []  # (text, position, kind: 1 number, 2 name, 3 other; 0 the end)
        for m in _TOKEN.finditer(text):
            kind = m.lastindex
            if kind is None:  # every match takes one of _TOKEN's three groups
                raise ValueError(f"selector {text!r}: no token at position {m.start()}")
            self.tokens.append((m.group(kind), m.start(kind), kind))
        self.tokens.append(("end of text", len(text), 0))
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i][0] if self.tokens[self.i][2] else ""

    def fail(self, expected: str):
        tok, pos, kind = self.tokens[self.i]
        found = repr(tok) if kind else "the end"
        raise UserError(f"selector {self.text!r}: expected {expected} at position {pos}, found {found}; grammar: {_GRAMMAR}")

    def take(self, literal: str) -> None:
        if self.peek() != literal:
            self.fail(repr(literal))
        self.i += 1

    def number(self) -> int:
        tok, _, kind = self.tokens[self.i]
        if kind != 1:
            self.fail("a number")
        self.i += 1
        return int(tok)

    def name(self) -> str:
        tok, _, kind = self.tokens[self.i]
        if kind != 2:
            self.fail("a projection name")
        self.i += 1
        return tok

    def braced(self, item) -> list:
        """``item`` or ``{item, item, ...}``."""
        if self.peek() != "{":
            return [item()]
        self.i += 1
        out = [item()]
        while self.peek() == ",":
            self.i += 1
            out.append(item())
        if self.peek() != "}":
            self.fail("',' or '}'")
        self.i += 1
        return out

    def index_item(self, what: str) -> int | tuple[int, int]:
        """N, or N-M as an inclusive (N, M)."""
        start, lo = self.tokens[self.i][1], self.number()
        if self.peek() != "-":
            return lo
        self.i += 1
        hi = self.number()
        if hi < lo:
            raise UserError(f"selector {self.text!r}: {what} range {lo}-{hi} at position {start} matches nothing (write low-high)")
        return (lo, hi)

    def index_set(self, what: str) -> list[int | tuple[int, int]] | None:
        """None for ``*``; else a list of indices and inclusive ranges."""
        if self.peek() == "*":
            self.i += 1
            return None
        return self.braced(lambda: self.index_item(what))

    def selector(self) -> "_Selector":
        start = self.tokens[self.i][1]
        self.take("blocks")
        self.take(".")
        layers = self.index_set("layer")
        self.take(".")
        self.take("attn")
        projs, heads, per_head = None, None, False
        if self.peek() == ".":
            self.i += 1
            projs = self.braced(self.name)
            if self.peek() == ".":
                self.i += 1
                self.take("head")
                self.take(".")
                heads, per_head = self.index_set("head"), True
        if self.peek() not in (",", ""):
            self.fail("',' or the end")
        return _Selector(self.text[start:self.tokens[self.i][1]].strip(), layers, projs, per_head, heads)

    def parse(self) -> list["_Selector"]:
        if not self.text.strip():
            raise UserError(f"selector {self.text!r} is empty; expected e.g. blocks.1-6.attn.{{qkv,o}} ({_GRAMMAR})")
        out = [self.selector()]
        while self.peek() == ",":
            self.i += 1
            out.append(self.selector())
        return out


@dataclass(frozen=True)
class _Selector:
    """One parsed selector: index sets are None for ``*`` (or absent), else indices and ranges."""

    text: str
    layers: list | None
    projs: list[str] | None
    per_head: bool
    heads: list | None


def _expand(items, n: int, what: str, selector: str, allowed: str) -> list[int]:
    """Indices of an index set; ``allowed`` says what exists (e.g. "this gpt2 model has layers 0..11")."""
    if items is None:
        return list(range(n))
    out: list[int] = []
    for item in items:
        lo, hi = item if isinstance(item, tuple) else (item, item)
        if hi >= n:
            raise UserError(f"selector {selector!r}: {what} {hi if lo < n else lo} out of range; {allowed}")
        out.extend(range(lo, hi + 1))
    return out


def parse_selector(text: str, adapter: AttentionAdapter) -> tuple[Target, ...]:
    """Targets of a selectors string for one model, deduplicated and sorted (layer, proj, head).

    Example::

        parse_selector("blocks.{0,1}.attn.q.head.0-1", adapter_for(model))
        # (Target(layer=0, proj='q', head=0), Target(layer=0, proj='q', head=1),
        #  Target(layer=1, proj='q', head=0), Target(layer=1, proj='q', head=1))
    """
    targets: set[Target] = set()
    family = adapter.family
    for sel in _Parser(text).parse():
        layers = _expand(sel.layers, adapter.n_layers, "layer", sel.text,
                         f"this {family} model has layers 0..{adapter.n_layers - 1}")
        for proj in sel.projs or HEAD_PROJECTIONS:
            if proj not in _PROJ_ORDER:
                raise UserError(f"selector {sel.text!r}: unknown projection {proj!r}; allowed: {', '.join(adapter.projections)}")
            if proj not in adapter.projections:
                raise UserError(f"selector {sel.text!r}: {proj} is the fused input projection (GPT-2's c_attn, GPT-NeoX's "
                                f"query_key_value); this {family} model has separate projections, use {{q,k,v}}")
            if not sel.per_head:
                targets.update(Target(layer, proj) for layer in layers)
                continue
            if proj == FUSED:
                raise UserError(f"selector {sel.text!r}: {FUSED} has no heads; select heads of q, k or v, e.g. {{q,k,v}}.head.0")
            n = adapter.n_heads_of(proj)
            kind = "query heads" if proj in ("q", "o") else "K/V heads"
            heads = _expand(sel.heads, n, f"{proj} head", sel.text, f"this {family} model has {n} {kind} (0..{n - 1}) for {proj}")
            targets.update(Target(layer, proj, head) for layer in layers for head in heads)
    _check_overlaps(targets, text)
    return tuple(sorted(targets, key=Target.sort_key))


def _check_overlaps(targets: set[Target], text: str) -> None:
    """A whole matrix may not be selected together with another target touching it."""
    touching: dict[tuple[int, str], list[Target]] = defaultdict(list)
    for t in targets:
        for part in _COVERS[t.proj]:
            touching[(t.layer, part)].append(t)
    for (layer, part), ts in touching.items():
        whole = [t for t in ts if t.head is None]
        if whole and len(ts) > 1:
            a, b = sorted(ts, key=Target.sort_key)[:2]
            raise UserError(f"selector {text!r} is ambiguous: {a.name} and {b.name} both change blocks.{layer}.attn.{part}; "
                            "select each matrix once: whole, as part of qkv, or some of its heads")
