"""Training of the disentangled lab: one batched pass over an ensemble of *members*.

A member is (seed, variant): its own data (drawn from its seed and its mixture), its own
hyper-parameters (eta1, eta2, t1, update noise, L2 lambda) and its own random streams
(init, update noise, minibatches). Everything that keeps tensor shapes is a per-member
tensor, so seeds x ablations run as one computation; member i equals a single run of it.

Step t (1-based) uses the learning rate of step t; step 0 is the initialization. Metrics
logged at step t describe the weights after t updates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from collections.abc import Mapping
from typing import Any, Callable

import torch

from ...engine import BatchedOptimizer, pack, resolve_dtype, unpack
from ...engine.driver import StepOutput, TrainingDriver
from ...engine.perf import training_threads
from .config import Config
from .data import SPLIT_STREAMS, STREAMS, DataSpec, check_sampling, draw_member, geometry
from .model import Batch, empty_features, feature_slot, forward, gradients


# member fields that change the data (members that agree on them and on the seed share one dataset)
DATA_FIELDS = ("p0", "q0", "zeta", "q_centre", "p_flip", "control")
NOISE_MODES = ("lr", "constant", "stage1")


@dataclass(frozen=True)
class Member:
    """One ensemble member: a seed under one variant's hyper-parameters and data parameters.

    ``control``: the shuffled-label control; the training targets y_L are permuted across
    the N training prompts (a fixed permutation per seed), so nothing about the query's
    features predicts its target. Test prompts are not shuffled. ``noise_mode``: the update
    noise std per entry is noise * lr_t ("lr", Li-Wei-Ma's), noise * eta1 at every step
    ("constant": annealing lowers the rate, not the noise), or noise * lr_t up to t1 and 0
    after ("stage1": the noise stops at t1)."""

    seed: int
    variant: str = "baseline"
    eta1: float = 1.0
    eta2: float = 0.1
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
    control: bool = False

    def data_key(self) -> tuple:
        """What decides this member's training data: the seed and the data fields."""
        return (self.seed, *(getattr(self, k) for k in DATA_FIELDS))


MEMBER_FIELDS = {"lr_stage1": "eta1", "lr_stage2": "eta2"}
"""Config names (``train.lr_stage1``, grid keys) -> the :class:`Member` fields (the paper's eta1, eta2)."""


def members_from_config(config: Config, variant: str = "baseline", **overrides: Any) -> list[Member]:
    """The ensemble's members (one per seed) with this config's hyper-parameters, ``overrides``
    (Member fields or their config names, :data:`MEMBER_FIELDS`) applied."""
    tc, dc = config.train, config.data
    base: dict[str, Any] = dict(eta1=tc.eta1, eta2=tc.eta2, t1=tc.t1, noise=tc.noise, l2=tc.l2, p0=dc.p0, q0=dc.q0, zeta=dc.zeta,
                q_centre=dc.q_centre, p_flip=dc.p_flip, batch_size=tc.batch_size, noise_mode=tc.noise_mode)
    base.update({MEMBER_FIELDS.get(k, k): v for k, v in overrides.items()})
    if "batch_size" in base:
        base["batch_size"] = int(base["batch_size"])
    return [Member(seed=config.seed + i, variant=variant, **base) for i in range(config.n_seeds)]


def data_spec(config: Config, member: Member | None = None) -> DataSpec:
    dc = config.data
    spec = DataSpec(d=dc.d, prompt_len=dc.prompt_len, q_geometry=dc.q_geometry, p0=dc.p0, q0=dc.q0, gamma0=dc.gamma0,
                    p_noise=dc.p_noise, q_noise=dc.q_noise, zeta=dc.zeta, w_star=dc.w_star, q_centre=dc.q_centre,
                    label_rule=dc.label_rule, p_flip=dc.p_flip, q_noise_radius=dc.q_noise_radius)
    if member is None:
        return spec
    return replace(spec, **{k: getattr(member, k) for k in DATA_FIELDS if k != "control"})


@dataclass
class Ensemble:
    """Data and per-member settings of one batched group (M members)."""

    config: Config
    members: list[Member]
    train: Batch
    test: Batch
    hyper: dict[str, torch.Tensor]  # eta1, eta2, t1, noise, l2, noise_constant, noise_stage1: (M,)
    rngs: dict[str, list[torch.Generator]] = field(default_factory=dict)
    w_star: torch.Tensor | None = None  # (M, d) each member's P direction
    zeta_basis: torch.Tensor | None = None  # (M, 2, d) orthonormal basis of its span(zeta1, zeta2)

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
    expand = lambda t: t.repeat_interleave(per_data, dim=0).contiguous()  # noqa: E731  (M, ...)
    target = expand(y[:, :, -1])  # (M, N)
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
    dtype = resolve_dtype(config.model.dtype)
    hyper = {k: torch.tensor([float(getattr(m, k)) for m in members], dtype=dtype) for k in ("eta1", "eta2", "t1", "noise", "l2")}
    for mode in NOISE_MODES[1:]:  # (M,) 1.0 where the member's noise follows that mode
        hyper[f"noise_{mode}"] = torch.tensor([float(m.noise_mode == mode) for m in members], dtype=dtype)
    ens = Ensemble(config, members, _prompts(config, members, config.data.n_train, "train", dtype),
                   _prompts(config, members, config.data.n_test, "test", dtype), hyper)
    ens.rngs = {name: [STREAMS.torch(m.seed, name) for m in members] for name in ("noise", "batch")}
    dirs = [geometry(data_spec(config, m), [m.seed]) for m in members]
    ens.w_star = torch.cat([w for w, _ in dirs]).to(dtype)  # (M, d)
    ens.zeta_basis = torch.cat([z for _, z in dirs]).to(dtype)  # (M, 2, d)
    return ens


def learning_rate(config: Config, hyper: dict[str, torch.Tensor], step: int) -> torch.Tensor:
    """Per-member learning rate of update ``step`` (1-based), shape (M,)."""
    tc = config.train
    eta1, eta2, t1 = hyper["eta1"], hyper["eta2"], hyper["t1"]
    annealed = torch.where(step <= t1, eta1, eta2)
    if tc.schedule == "constant":
        return eta1.clone()
    if tc.schedule == "cosine":
        return eta2 + (eta1 - eta2) * 0.5 * (1 + math.cos(math.pi * min(step, tc.steps) / tc.steps))
    if tc.schedule == "warmup" and step <= tc.warmup_steps:
        return eta1 * step / max(1, tc.warmup_steps)
    return annealed


def init_weights(config: Config, members: list[Member], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """(W, V) each (M, d, d), or (A,) (M, 2d, 2d) for full weights; i.i.d. N(0, sigma0^2)."""
    d = config.data.d
    shapes = [(2 * d, 2 * d)] if config.model.weights == "full" else [(d, d), (d, d)]
    out = []
    for k, shape in enumerate(shapes):
        draws = [torch.randn(shape, generator=STREAMS.torch(m.seed, "init", k), dtype=torch.float64) for m in members]
        out.append((config.model.init_scale * torch.stack(draws)).to(dtype))
    return tuple(out)


def _gaussian(rngs: list[torch.Generator], shape: tuple[int, ...], dtype: torch.dtype,
              device: torch.device | None = None) -> torch.Tensor:
    """One standard-normal draw per member from its own stream: (M, *shape)."""
    return torch.stack([torch.randn(shape, generator=g, dtype=torch.float64) for g in rngs]).to(device=device, dtype=dtype)


def _minibatch(ens: Ensemble) -> torch.Tensor:
    """(M, N) prompt weights of one SGD step: 1/B_i on B_i prompts drawn per member i
    (B_i = its batch size, at most N; B_i = N is full-batch GD)."""
    n = ens.config.data.n_train
    weight = torch.zeros(ens.size, n, dtype=ens.hyper["l2"].dtype)
    for i, (g, m) in enumerate(zip(ens.rngs["batch"], ens.members)):
        b = min(m.batch_size, n)
        weight[i, torch.randperm(n, generator=g)[:b]] = 1.0 / b
    return weight.to(ens.device)


@dataclass
class State:
    """Everything a checkpoint needs: weights, optimizer moments, RNG states, step."""

    weights: list[torch.Tensor]
    moments: dict[str, torch.Tensor] = field(default_factory=dict)
    step: int = 0

    def optimizer(self, tc) -> BatchedOptimizer:
        """The engine's optimizer over this state's moments (shared dict: updates land here)."""
        opt = BatchedOptimizer(tc.optimizer, tuple(tc.betas), tc.adam_eps, tc.weight_decay)
        opt.state = self.moments
        return opt

    def tensors(self, ens: Ensemble, prefix: str) -> dict[str, torch.Tensor]:
        """Checkpoint tensors (the engine's packing): ``{prefix}w.{i}``, ``{prefix}opt.{moment}``,
        ``{prefix}rng.{stream}`` (the members' generator states, stacked)."""
        rngs = {name: torch.stack([g.get_state() for g in gens]) for name, gens in ens.rngs.items()}
        return pack(**{f"{prefix}w": {str(i): w for i, w in enumerate(self.weights)}, f"{prefix}opt": self.moments,
                       f"{prefix}rng": rngs})

    @classmethod
    def restore(cls, tensors: dict[str, torch.Tensor], ens: Ensemble, prefix: str, step: int) -> "State":
        """The state saved by :meth:`tensors`, generators set back in place; on ``ens``'s device."""
        weights = unpack(tensors, f"{prefix}w", ens.device)
        for name, states in unpack(tensors, f"{prefix}rng").items():
            for g, st in zip(ens.rngs[name], states):
                g.set_state(st.clone())
        return cls([weights[str(i)] for i in range(len(weights))], unpack(tensors, f"{prefix}opt", ens.device), step)


def update(ens: Ensemble, state: State, step: int) -> None:
    """One optimizer step (update number ``step``) for every member."""
    config, tc = ens.config, ens.config.train
    lr = learning_rate(config, ens.hyper, step)  # (M,)
    weight = _minibatch(ens) if tc.optimizer == "sgd" else None
    fwd = forward(tuple(state.weights), ens.train, config.model.output, config.model.normalizer)
    grads = gradients(fwd, ens.train, config.model.normalizer, weight, config.train.objective)
    l2 = ens.hyper["l2"].view(-1, 1, 1)
    names = [f"w{i}" for i in range(len(state.weights))]
    params = dict(zip(names, state.weights))
    full = {n: g + l2 * w for n, w, g in zip(names, state.weights, grads)}  # + gradient of (lambda/2)||w||^2
    state.optimizer(tc).step(params, full, names, lr)
    state.weights = [params[n] for n in names]
    if bool((ens.hyper["noise"] > 0).any()):
        # one draw per member and matrix, matrices in order (torch's normal sampler fills
        # blocks of 16, so one joint draw would not equal separate draws)
        scale = noise_std(ens.hyper, lr, step).view(-1, 1, 1)
        for i, w in enumerate(state.weights):
            state.weights[i] = w + scale * _gaussian(ens.rngs["noise"], tuple(w.shape[1:]), w.dtype, w.device)
    # a fixed layout: resumed runs (contiguous loads) must take the same kernels
    state.weights = [w.contiguous() for w in state.weights]


def noise_std(hyper: dict[str, torch.Tensor], lr: torch.Tensor, step: int) -> torch.Tensor:
    """Per-member update-noise std per entry at update ``step``, (M,): noise * lr_t, or
    noise * eta1 ("constant"), or noise * lr_t until t1 and 0 after ("stage1")."""
    rate = torch.where(hyper["noise_constant"] > 0, hyper["eta1"], lr)
    on = torch.where((hyper["noise_stage1"] > 0) & (step > hyper["t1"]), 0.0, 1.0)
    return hyper["noise"] * rate * on


def run_training(ens: Ensemble, state: State, total: int, on_step: Callable[[int, State], None],
                 progress=None) -> State:
    """Updates state.step+1 .. total, calling ``on_step(t, state)`` after each (and at the
    start when state.step == 0), through the engine's step driver without a run context:
    nothing is logged, checked or saved (the lab's runs go through
    :func:`.experiments.run_group`, which gives the driver its context)."""
    with training_threads(ens.config.thread_count(ens.size)):
        TrainingDriver(None, [m.seed for m in ens.members], total, lambda t: False, progress=progress) \
            .run(UpdateLoop(ens, state, on_step), start=state.step)
    return state


class UpdateLoop:
    """The updates of one ensemble behind the engine's :class:`~stagewise.engine.driver.Loop`:
    step t is :func:`update` number t, then ``on_step(t, state)`` (step 0: ``on_step`` only).
    Checkpoint tensors are :meth:`State.tensors` under ``prefix`` (e.g. ``"g0."`` per group).
    No metrics: :class:`.experiments.GroupLoop` adds them (and ``after``, ``diverged``)."""

    def __init__(self, ens: Ensemble, state: State, on_step: Callable[[int, State], None] | None = None, prefix: str = ""):
        self.ens, self.current, self.on_step, self.prefix = ens, state, on_step, prefix

    def step(self, t: int, log: bool) -> StepOutput:
        if t > 0:
            update(self.ens, self.current, t)
            self.current.step = t
        if self.on_step is not None:
            self.on_step(t, self.current)
        return StepOutput()

    def weights(self) -> dict[str, torch.Tensor]:
        """The matrices, (M, d, d) each (W, V), or (M, 2d, 2d) (full weights)."""
        names = ("W", "V") if len(self.current.weights) == 2 else ("blockdiag(W, V)",)
        return dict(zip(names, self.current.weights))

    def state(self) -> dict[str, torch.Tensor]:
        return self.current.tensors(self.ens, self.prefix)

    def meta(self, t: int) -> dict[str, int]:
        return {"step": t}

    def restore(self, checkpoint: Any) -> int:
        self.current = State.restore(checkpoint.tensors, self.ens, self.prefix, checkpoint.step)
        return self.current.step

    def after(self, t: int) -> None:
        """Nothing after the record (subclasses add evaluations or tables)."""

    def diverged(self, t: int) -> Mapping[str, torch.Tensor] | None:
        """No record for a step with non-finite weights (subclasses evaluate it)."""
        return None
