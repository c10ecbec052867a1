"""The members of one batched group of the disentangled lab, and their data.

A member is (seed, variant): its own data (drawn from its seed and its mixture), its own
hyper-parameters (lr_stage1, lr_stage2, t1, update noise, L2 lambda: the config's names) and
its own random streams (init, update noise, minibatches). Everything that keeps tensor
shapes is a per-member tensor (:attr:`Ensemble.hyper`, (S,) each), so seeds x ablations
train as one computation (:mod:`.train`); member i equals a single run of it.

Members that share a dataset (same seed and data fields) are stored once: :func:`data_major`
orders them, :func:`data_layout` finds the blocks, and the model contracts each dataset once
for its K members.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from ...engine import resolve_dtype
from .config import Config
from .data import SPLIT_STREAMS, STREAMS, DataSpec, check_sampling, draw_member, geometry
from .model import Batch, empty_features, feature_slot


# member fields that change the data (members that agree on them and on the seed share one dataset)
DATA_FIELDS = ("p0", "q0", "zeta", "q_centre", "p_flip", "control")
NOISE_MODES = ("lr", "constant", "stage1")


@dataclass(frozen=True)
class Member:
    """One ensemble member: a seed under one variant's hyper-parameters and data parameters.

    ``control``: the shuffled-label control; the training targets y_L are permuted across
    the N training prompts (a fixed permutation per seed), so nothing about the query's
    features predicts its target. Test prompts are not shuffled. ``noise_mode``: the update
    noise std per entry is noise * lr ("lr", Li-Wei-Ma's; lr the rate of the step), noise *
    lr_stage1 at every step ("constant": annealing lowers the rate, not the noise), or noise *
    lr up to t1 and 0 after ("stage1": the noise stops at t1); after t1 the std is further
    scaled by ``noise_stage2`` (1 by default). The fields are named as the
    config's (``train.lr_stage1``, ``data.p0``, ...; the paper's eta1, eta2 are lr_stage1, lr_stage2)."""

    seed: int
    variant: str = "baseline"
    lr_stage1: float = 1.0
    lr_stage2: float = 0.1
    t1: int = 300
    noise: float = 0.05
    l2: float = 0.01
    p0: float = 0.2
    q0: float = 0.2
    zeta: float = 0.5
    q_centre: float = 0.0
    p_flip: float = 0.0
    batch_size: int = 64
    noise_mode: str = "lr"
    noise_stage2: float = 1.0
    control: bool = False

    def data_key(self) -> tuple:
        """What decides this member's training data: the seed and the data fields."""
        return (self.seed, *(getattr(self, k) for k in DATA_FIELDS))


def members_from_config(config: Config, variant: str = "baseline", **overrides: Any) -> list[Member]:
    """The ensemble's members (one per seed) with this config's hyper-parameters, ``overrides``
    (:class:`Member` fields, named as the config's: ``lr_stage1``, ``noise``, ``p0``, ...) applied."""
    tc, dc = config.train, config.data
    base: dict[str, Any] = dict(lr_stage1=tc.lr_stage1, lr_stage2=tc.lr_stage2, t1=tc.t1, noise=tc.noise, l2=tc.l2, p0=dc.p0,
                                q0=dc.q0, zeta=dc.zeta, q_centre=dc.q_centre, p_flip=dc.p_flip, batch_size=tc.batch_size,
                                noise_mode=tc.noise_mode, noise_stage2=tc.noise_stage2)
    base.update(overrides)
    if "batch_size" in base:
        base["batch_size"] = int(base["batch_size"])
    return [Member(seed=config.seed + i, variant=variant, **base) for i in range(config.n_seeds)]


def data_spec(config: Config, member: Member | None = None) -> DataSpec:
    """The data distribution of ``config`` (None) or of one member (its data fields over the config's)."""
    dc = config.data
    spec = DataSpec(d=dc.d, prompt_len=dc.prompt_len, q_geometry=dc.q_geometry, p0=dc.p0, q0=dc.q0, gamma0=dc.gamma0,
                    p_noise=dc.p_noise, q_noise=dc.q_noise, zeta=dc.zeta, w_star=dc.w_star, q_centre=dc.q_centre,
                    label_rule=dc.label_rule, p_flip=dc.p_flip, q_noise_radius=dc.q_noise_radius)
    if member is None:
        return spec
    return replace(spec, **{k: getattr(member, k) for k in DATA_FIELDS if k != "control"})


@dataclass
class Ensemble:
    """Data and per-member settings of one batched group (S members)."""

    config: Config
    members: list[Member]
    train: Batch
    test: Batch
    hyper: dict[str, torch.Tensor]  # lr_stage1, lr_stage2, t1, noise, l2, noise_stage2, noise_constant, noise_stage1: (S,)
    rngs: dict[str, list[torch.Generator]] = field(default_factory=dict)
    w_star: torch.Tensor | None = None  # (S, d) each member's P direction
    zeta_basis: torch.Tensor | None = None  # (S, 2, d) orthonormal basis of its span(zeta1, zeta2)

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def device(self) -> torch.device:
        return self.hyper["l2"].device

    def to(self, device: torch.device) -> "Ensemble":
        """The same ensemble with its tensors on ``device`` (random streams stay on the CPU)."""
        move = lambda b: replace(b, **{k: getattr(b, k).to(device) for k in ("ctx", "query", "labels", "target", "kind")})  # noqa: E731
        return replace(self, train=move(self.train), test=move(self.test), hyper={k: v.to(device) for k, v in self.hyper.items()},
                       w_star=None if self.w_star is None else self.w_star.to(device),
                       zeta_basis=None if self.zeta_basis is None else self.zeta_basis.to(device))


def feature_key(member: Member) -> tuple:
    """What decides a member's prompt features (x1, x2, context labels, kinds): the seed and the
    data fields but ``control``, which permutes only the training targets y_L."""
    return (member.seed, *(getattr(member, k) for k in DATA_FIELDS if k != "control"))


def data_layout(members: list[Member]) -> tuple[list[Member], int]:
    """(one member per dataset, K) when members come in data-major blocks of K that share a
    dataset (same :func:`feature_key`: a shuffled-label control shares its seed's features;
    or, where that gives larger blocks, the same :meth:`Member.data_key`, controls apart);
    otherwise every member keeps its own copy (K = 1)."""
    def blocks_of(keys: list[tuple]) -> int:
        for k in range(len(keys), 1, -1):
            if len(keys) % k:
                continue
            blocks = [keys[i:i + k] for i in range(0, len(keys), k)]
            if all(len(set(b)) == 1 for b in blocks) and len({b[0] for b in blocks}) == len(blocks):
                return k
        return 1
    k = max(blocks_of([feature_key(m) for m in members]), blocks_of([m.data_key() for m in members]))
    return members[::k], k


def data_major(members: list[Member]) -> list[Member]:
    """``members`` reordered (stably) so that those sharing a dataset (:func:`feature_key`) are
    consecutive: with K members per dataset, :func:`data_layout` then stores each dataset once
    and the model contracts it once for its K members. Each variant keeps its seeds' order."""
    blocks: dict[tuple, list[Member]] = {}
    for m in members:
        blocks.setdefault(feature_key(m), []).append(m)
    return [m for block in blocks.values() for m in block]


def _prompts(config: Config, members: list[Member], n: int, split: str, dtype: torch.dtype) -> Batch:
    """Sample each dataset once, straight into the Batch's buffers (data-major for shared
    datasets): the features are the only (U, N, L, 2d)-sized arrays; the sampler's
    temporaries are a chunk of prompts (:func:`.data.draw_member`).

    Test prompts are drawn from the member's own distribution (zeta, q_centre, p_flip) with
    two exceptions: the mixture is the config's (so a variant trained with the mixture off
    is still measured on P-only / Q-only / both queries) and the targets are never shuffled
    (a control is measured on the baseline's test set). A training control's targets are its
    dataset's, permuted (:func:`control_permutation`)."""
    if split == "test":
        members = [replace(m, p0=config.data.p0, q0=config.data.q0, control=False) for m in members]
    owners, per_data = data_layout(members)
    full = config.model.weights == "full"
    ctx, query = empty_features(len(owners), n, config.data.prompt_len, config.data.d, full, dtype)
    ys, kinds = [], []
    for u, owner in enumerate(owners):
        spec = data_spec(config, owner)
        check_sampling(spec, [owner.seed], n, split)
        write_x1, write_x2 = (_writer(*feature_slot(ctx, query, u, block, full)) for block in (0, 1))
        drawn = draw_member(spec, owner.seed, n, SPLIT_STREAMS[split], write_x1, write_x2)
        ys.append(drawn.y)
        kinds.append(drawn.kind)
    y = torch.stack(ys).to(dtype)  # (U, N, L)
    expand = lambda t: t.repeat_interleave(per_data, dim=0).contiguous()  # noqa: E731  (S, ...)
    target = expand(y[:, :, -1])  # (S, N)
    if split == "train":
        for i, m in enumerate(members):
            if m.control:
                target[i] = target[i, control_permutation(m.seed, n)]
    return Batch(ctx, query, expand(y[:, :, :-1]), target, expand(torch.stack(kinds)[:, :, -1]), per_data)


def _writer(ctx: torch.Tensor, query: torch.Tensor) -> Callable[[int, int, torch.Tensor], None]:
    """A :data:`.data.Writer` into one dataset's block: prompts a..b-1, tokens 0..L-2 -> ctx (N, C, d),
    token L-1 -> query (N, d), cast to the buffers' dtype."""
    def write(a: int, b: int, block: torch.Tensor) -> None:
        ctx[a:b].copy_(block[:, :-1])
        query[a:b].copy_(block[:, -1])
    return write


def control_permutation(seed: int, n: int) -> torch.Tensor:
    """The shuffled-label control's permutation of the N training prompts of ``seed`` (stream "control")."""
    return torch.randperm(n, generator=STREAMS.torch(seed, "control"))  # (N,)


def build_ensemble(config: Config, members: list[Member]) -> Ensemble:
    """The group's data (training and test prompts, each dataset drawn once), its per-member
    settings ``hyper`` ((S,) each, named as the Member fields) and random streams, on the CPU."""
    dtype = resolve_dtype(config.model.dtype)
    hyper = {k: torch.tensor([float(getattr(m, k)) for m in members], dtype=dtype)
             for k in ("lr_stage1", "lr_stage2", "t1", "noise", "l2", "noise_stage2")}
    for mode in NOISE_MODES[1:]:  # (S,) 1.0 where the member's noise follows that mode
        hyper[f"noise_{mode}"] = torch.tensor([float(m.noise_mode == mode) for m in members], dtype=dtype)
    ens = Ensemble(config, members, _prompts(config, members, config.data.n_train, "train", dtype),
                   _prompts(config, members, config.data.n_test, "test", dtype), hyper)
    ens.rngs = {name: [STREAMS.torch(m.seed, name) for m in members] for name in ("noise", "batch")}
    dirs = [geometry(data_spec(config, m), [m.seed]) for m in members]
    ens.w_star = torch.cat([w for w, _ in dirs]).to(dtype)  # (S, d)
    ens.zeta_basis = torch.cat([z for _, z in dirs]).to(dtype)  # (S, 2, d)
    return ens

