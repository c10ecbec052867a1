"""The batched problem of an NTP run: one dataset, embedding and max-margin target per
ensemble member, padded and stacked along a leading axis S.

Every member's randomness comes from its own seed (data, rotation, init), so member i of
an ensemble equals a single run with seed ``seed + i``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

import numpy as np
import torch

from ...engine import SeedStreams, resolve_dtype
from ...errors import UserError
from .config import Config
from .data import example1, load_json_dataset, random_dataset, to_tensors
from .dataset import NTPDataset
from .generalize import GenCase, build_suite
from .maxmargin import MaxMarginTargets, max_margin_targets
from .model import TokenBatch

# named streams of a member's seed; "init" has one sub-stream per weight matrix
STREAMS = SeedStreams({"data": 1, "embed": 2, "init": (13, 10), "suite": 4})


def member_dataset(config: Config, seed: int) -> NTPDataset:
    """The dataset of the member with ``seed`` (UserError on bad data)."""
    d = config.data
    if d.source == "example1":
        return example1()
    if d.source == "file":
        if d.file is None:
            raise UserError("data.source=file needs data.file=PATH.json")
        return load_json_dataset(d.file, weights=d.weights, max_len=d.max_len, allow=tuple(d.out_of_assumption))
    data_seed = seed if d.vary_with_seed else config.seed
    return random_dataset(
        d.vocab_size, seed=STREAMS.word(data_seed, "data", bits=32),
        optimal_per_query=d.optimal_per_query, non_optimal_per_query=d.non_optimal_per_query,
        sentences_per_query=d.sentences_per_query, complete=d.complete, prefix_closed=d.prefix_closed,
        max_len=d.max_len, weights=d.weights, out_of_assumption=tuple(d.out_of_assumption),
    )


def embedding(config: Config, vocab: int, seed: int) -> np.ndarray:
    """Token embeddings as columns, shape (d, |V|)."""
    dim = config.data.dim or vocab
    kind = config.data.embedding
    if kind != "gaussian" and dim < vocab:
        raise UserError(f"data.dim={dim}: must be >= |V| = {vocab} for orthonormal embeddings (or use data.embedding=gaussian)")
    rng = STREAMS.numpy(seed if config.data.vary_with_seed else config.seed, "embed")
    if kind == "onehot":
        return np.eye(dim, vocab)
    if kind == "rotated":
        q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
        q = q * np.sign(np.diag(r))  # Haar-distributed orthogonal matrix
        return q[:, :vocab]
    cols = rng.standard_normal((dim, vocab))
    return cols / np.linalg.norm(cols, axis=0, keepdims=True)


@dataclass(frozen=True)
class Problem:
    """Everything the trainer needs, stacked over the ensemble (S members).

    Shapes: N samples (padded to the largest member), L positions, d dim, V vocabulary,
    G generalization cases (padded). Sentences are token indices; the generalization
    suite uses index V for the unknown (zero-embedded) token.
    """

    seeds: list[int]
    datasets: list[NTPDataset]
    targets: list[MaxMarginTargets]
    suites: list[list[GenCase]]
    emb: torch.Tensor  # (S, d, V) token embeddings as columns
    batch: TokenBatch  # idx/mask (S, N, L), query/target/weight (S, N)
    opt_mask: torch.Tensor  # (S, N, L) positions holding the sample's optimal token
    opt_tok: torch.Tensor  # (S, N) each sample's optimal token
    multi: torch.Tensor  # (S, N) bool: real samples of length >= 2
    colloc: torch.Tensor  # (S, V) n(x)
    colloc_onehot: torch.Tensor  # (S, V, V) row x = e_{n(x)}
    wov_star: torch.Tensor  # (S, V, d)
    wkq_star: torch.Tensor  # (S, d, d) the QP solution (0 where no max-margin target exists)
    prop2_wkq: torch.Tensor  # (S, d, d) Proposition 2's closed form (diagnostic)
    type_masks: torch.Tensor  # (S, 3, V, V) [optimal, non-optimal, non-comparable][key, query]
    gen_idx: torch.Tensor  # (S, G, Lg) token indices, V = unknown token
    gen_query: torch.Tensor  # (S, G) query token
    gen_mask: torch.Tensor  # (S, G, Lg)
    gen_expected: torch.Tensor  # (S, G) expected token, -1 where not covered or padding

    @property
    def n_members(self) -> int:
        return len(self.seeds)

    @cached_property
    def emb_op(self) -> torch.Tensor | None:
        """The embedding for the token-space model, or None when it is the identity
        (one-hot with d = |V|), which lets the model skip multiplications by I."""
        d, V = self.emb.shape[1:]
        if d == V and torch.equal(self.emb, torch.eye(V, dtype=self.emb.dtype, device=self.emb.device).expand_as(self.emb)):
            return None
        return self.emb

    def to(self, device: torch.device) -> "Problem":
        """The same problem with every tensor on ``device`` (a no-op on the CPU)."""
        if self.emb.device == torch.device(device):
            return self
        moved = {f.name: getattr(self, f.name).to(device) for f in fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        batch = replace(self.batch, **{f.name: getattr(self.batch, f.name).to(device) for f in fields(self.batch)})
        return replace(self, batch=batch, **moved)

    def embedded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentences in embedding space: x (S, N, L, d) (0 on padding) and queries (S, N, d).

        Not used by training (which works on token indices); for reference implementations.
        """
        tok = self.emb.transpose(1, 2)  # (S, V, d)
        members = torch.arange(self.n_members)[:, None, None]
        x = tok[members, self.batch.idx] * self.batch.mask.unsqueeze(-1)  # (S, N, L, d)
        return x, tok[members[:, :, 0], self.batch.query]  # (S, N, d)


def build_problem(config: Config, dtype: torch.dtype | None = None) -> Problem:
    """Build datasets, embeddings, targets and suites for every seed of the ensemble.

    ``dtype`` defaults to ``config.model.dtype``.
    """
    if dtype is None:
        dtype = resolve_dtype(config.model.dtype)
    seeds = [config.seed + i for i in range(config.n_seeds)]
    datasets = [member_dataset(config, s) for s in seeds]
    vocab = {ds.vocab_size for ds in datasets}
    if len(vocab) != 1:
        raise UserError(f"ensemble members have different vocabularies {sorted(vocab)}")
    max_len = max(ds.max_len for ds in datasets)
    n_max = max(len(ds.samples) for ds in datasets)
    embs = [embedding(config, ds.vocab_size, s) for ds, s in zip(datasets, seeds)]
    targets = [max_margin_targets(ds, e) for ds, e in zip(datasets, embs)]
    suites = [build_suite(ds, config.generalize.max_cases, int(STREAMS.numpy(s, "suite").integers(2**31)))
              for ds, s in zip(datasets, seeds)]

    tens = [to_tensors(ds, max_len, n_max) for ds in datasets]
    stack = {k: torch.stack([t[k] for t in tens]) for k in tens[0]}  # each (S, N[, L])
    emb = torch.tensor(np.stack(embs), dtype=dtype)  # (S, d, V)
    opt_tok = torch.stack([torch.tensor([ds.optimal_token[i] if i < len(ds.samples) else 0 for i in range(n_max)])
                           for ds in datasets])  # (S, N)
    lengths = stack["mask"].sum(-1)  # (S, N)
    multi = (lengths >= 2) & (stack["weight"] > 0)

    V = datasets[0].vocab_size
    type_masks = torch.zeros(len(seeds), 3, V, V, dtype=torch.bool)
    for i, ds in enumerate(datasets):
        for q, qs in ds.structure.items():
            for k, group in enumerate((qs.optimal, qs.non_optimal, qs.non_comparable)):
                type_masks[i, k, sorted(group), q] = True

    g_max = max(1, max(len(s) for s in suites))
    lg = max([len(c.input) for s in suites for c in s] + [1])
    gen_idx = torch.zeros(len(seeds), g_max, lg, dtype=torch.long)
    gen_mask = torch.zeros(len(seeds), g_max, lg, dtype=torch.bool)
    gen_query = torch.zeros(len(seeds), g_max, dtype=torch.long)
    gen_expected = torch.full((len(seeds), g_max), -1, dtype=torch.long)
    for i, suite in enumerate(suites):
        for j, case in enumerate(suite):
            gen_idx[i, j, : len(case.input)] = torch.tensor(case.input)
            gen_mask[i, j, : len(case.input)] = True
            gen_query[i, j] = case.input[-1]
            gen_expected[i, j] = -1 if case.expected is None else case.expected
        gen_mask[i, len(suite):, 0] = True  # padding cases: one valid position

    batch = TokenBatch.build(stack["idx"], stack["mask"], stack["query"], stack["next"], stack["weight"].to(dtype), V)
    colloc = torch.tensor([list(ds.collocation) for ds in datasets])  # (S, V)
    return Problem(
        seeds=seeds, datasets=datasets, targets=targets, suites=suites, emb=emb, batch=batch,
        opt_mask=stack["opt_mask"], opt_tok=opt_tok, multi=multi,
        colloc=colloc, colloc_onehot=torch.nn.functional.one_hot(colloc, V).to(dtype),
        wov_star=torch.tensor(np.stack([t.wov_star for t in targets]), dtype=dtype),
        wkq_star=torch.tensor(np.stack([t.wkq_star for t in targets]), dtype=dtype),
        prop2_wkq=torch.tensor(np.stack([t.prop2_wkq for t in targets]), dtype=dtype),
        type_masks=type_masks, gen_idx=gen_idx, gen_query=gen_query, gen_mask=gen_mask, gen_expected=gen_expected,
    )
