"""Sweep specifications: a YAML file naming a lab, a base and axes, expanded into RunSpecs.

Format (axes are dotted config keys, as with ``--set``)::

    lab: ntp
    preset: paper
    config: null                      # optional YAML config file, as with --config
    set: {train.steps_stage1: 300}    # fixed overrides, as with --set
    axes:
      train.lr_stage2: [0.005, 0.01, 0.02]  # a list
      seed: {range: [0, 2]}           # 0, 1 (Python's range); also [a, b, step]
      train.lr_stage1: {logrange: [0.01, 1.0, 3]}             # 3 log-spaced values, ends included
      train.noise: {random: loguniform, low: 1e-3, high: 1e-1, n: 4, seed: 0}
    zip: [[train.lr_stage2, train.lr_stage1]]    # axes that vary together (equal lengths)
    fold: none                        # seeds: fold points that differ only in their seeds into batched runs
    executor: {kind: local}           # see orchestrate.executors.ExecutorOptions
    report: {}                        # figures of `sweep collect` (orchestrate.collect)

The points are the product over the axis groups (a zip group counts as one axis, at the
place of its first member), in the order the axes are written. Every point becomes one
:class:`~stagewise.labs.RunSpec`; :func:`plan` validates every expanded config (and runs
the lab's own checks) before anything starts, so a bad axis or value is one line naming
the point's axes.

Folding (``fold: seeds``): points whose configs differ only in ``seed`` (and ``n_seeds``)
and whose seed ranges are adjacent run as one batched ensemble (member i of an ensemble
equals a single run with its seed, the engine's seed-stream rule), at most
``fold_max_seeds`` seeds per run. Per-seed results are the same as unfolded; run-level
claims are then computed over the folded run's seeds (``sweep collect`` records how many).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import config_hash, deep_merge, dotted_overrides, validate
from ..errors import UserError, validation_line
from ..labs import RunSpec, get_lab, spec_config, spec_lab
from ..yamlio import load_yaml

MAX_POINTS = 100_000  # a sweep larger than this is a typo, not a plan
INT_BOUND = 2.0**63  # integer draws stay inside int64


class RandomAxis(BaseModel):
    """``{random: uniform | loguniform | int, low, high, n, seed}``: n draws, seeded."""

    model_config = ConfigDict(extra="forbid")
    random: Literal["uniform", "loguniform", "int"]
    low: float
    high: float
    n: int = Field(ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _bounds(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.high <= self.low:
            raise ValueError(f"need finite low < high (got low={self.low:g}, high={self.high:g})")
        if self.random == "loguniform" and self.low <= 0:
            raise ValueError(f"loguniform needs low > 0 (got {self.low:g})")
        if self.random == "int":
            if math.ceil(self.low) > math.floor(self.high):
                raise ValueError(f"int draws need an integer in [low, high] (got low={self.low:g}, high={self.high:g})")
            if max(abs(self.low), abs(self.high)) >= INT_BOUND:
                raise ValueError(f"int draws need |low|, |high| < 2**63 (got low={self.low:g}, high={self.high:g})")
        return self

    def values(self) -> list[float | int]:
        rng = np.random.default_rng(self.seed)
        if self.random == "int":
            return [int(v) for v in rng.integers(math.ceil(self.low), math.floor(self.high) + 1, self.n)]
        if self.random == "loguniform":
            return [float(v) for v in np.exp(rng.uniform(math.log(self.low), math.log(self.high), self.n))]
        return [float(v) for v in rng.uniform(self.low, self.high, self.n)]


def axis_size(name: str, spec: Any) -> int:
    """How many values the axis has, from its YAML form alone (nothing is built, so a
    ``{range: [0, 1e9]}`` costs nothing); one-line UserError naming the axis on a bad form."""
    where = f"sweep axis {name}"
    if isinstance(spec, list):
        if not spec:
            raise UserError(f"{where}: empty list; give at least one value")
        return len(spec)
    if not isinstance(spec, dict) or len(spec) < 1:
        raise UserError(f"{where}={spec!r}: expected a list, {{range: [a, b(, step)]}}, {{logrange: [lo, hi, n]}} "
                        "or {random: uniform|loguniform|int, low, high, n, seed}")
    if "random" in spec:
        return _random_axis(where, spec).n
    if set(spec) == {"range"}:
        args = spec["range"]
        if (not isinstance(args, list) or not 2 <= len(args) <= 3
                or not all(isinstance(a, int) and not isinstance(a, bool) for a in args) or (len(args) == 3 and args[2] == 0)):
            raise UserError(f"{where}: range={args!r}: expected [start, stop] or [start, stop, step] of integers, step != 0")
        size = len(range(*args))  # O(1): no list is made
        if not size:
            raise UserError(f"{where}: range={args!r} is empty")
        return size
    if set(spec) == {"logrange"}:
        args = spec["logrange"]
        ok = (isinstance(args, list) and len(args) == 3
              and all(isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a) for a in args)
              and args[0] > 0 and args[1] > 0 and isinstance(args[2], int) and args[2] >= 1)
        if not ok:
            raise UserError(f"{where}: logrange={args!r}: expected [low > 0, high > 0, n >= 1 (integer)], finite")
        return args[2]
    raise UserError(f"{where}: unknown form {sorted(spec)}; allowed: range, logrange, random (or a list)")


def _random_axis(where: str, spec: dict[str, Any]) -> RandomAxis:
    try:
        return RandomAxis.model_validate(spec)
    except ValidationError as err:
        raise UserError(f"{where}: {validation_line(err)}") from None


def axis_values(name: str, spec: Any) -> list[Any]:
    """The values of one axis from its YAML form (checked by :func:`axis_size` first)."""
    axis_size(name, spec)
    if isinstance(spec, list):
        return list(spec)
    if "random" in spec:
        return _random_axis(f"sweep axis {name}", spec).values()
    if "range" in spec:
        return list(range(*spec["range"]))
    low, high, n = spec["logrange"]
    return [float(v) for v in np.geomspace(low, high, n)]


class SweepSpec(BaseModel):
    """The parsed sweep file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    lab: str
    preset: str | None = None
    config: Path | None = None
    set_: dict[str, Any] = Field(default_factory=dict, alias="set")
    axes: dict[str, Any] = Field(default_factory=dict)
    zip: list[list[str]] = Field(default_factory=list)
    fold: Literal["none", "seeds"] = "none"
    fold_max_seeds: int = Field(64, ge=1)
    executor: dict[str, Any] = Field(default_factory=dict)
    report: dict[str, Any] = Field(default_factory=dict)

    def log_axes(self) -> list[str]:
        """The axes given log-spaced (``logrange``, ``random: loguniform``): plotted on a log scale."""
        return [name for name, spec in self.axes.items() if isinstance(spec, dict)
                and ("logrange" in spec or spec.get("random") == "loguniform")]


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its axis values, its RunSpec and its config hash."""

    values: dict[str, Any]
    spec: RunSpec
    hash: str
    validated: Any = field(default=None, compare=False, repr=False)  # the spec's config, when already validated

    def config(self) -> Any:
        return self.validated if self.validated is not None else spec_config(self.spec)

    @property
    def label(self) -> str:
        return point_label(self.values)


@dataclass(frozen=True)
class SweepRun:
    """One run folder of a sweep (``runs/KEY``) and the points it serves; ``seeds[i]`` are
    the seeds of that run that belong to ``points[i]``."""

    key: str
    spec: RunSpec
    points: tuple[SweepPoint, ...]
    seeds: tuple[tuple[int, ...], ...]


def _seed_range(point: SweepPoint) -> tuple[int, int]:
    config = point.config()
    return int(config.seed), int(config.n_seeds)


def fold_points(points: list[SweepPoint], fold: str = "none", max_seeds: int = 64,
                allow_large: bool = False) -> list[SweepRun]:
    """The runs of a sweep: one per point, or (``fold="seeds"``) points differing only in
    their seeds merged into batched runs of adjacent seed ranges, at most ``max_seeds`` each
    (a folded run's memory estimate is checked as ``stagewise run`` checks it).
    Runs come in the order of their first point."""
    if fold == "none":
        return [SweepRun(p.hash, p.spec, (p,), (tuple(range(*_span(p))),)) for p in points]
    groups: dict[str, list[tuple[int, int, SweepPoint]]] = {}
    for p in points:
        first, n = _seed_range(p)
        rest = deep_merge(p.spec.overrides, {"seed": 0, "n_seeds": 1})
        key = config_hash(validate(spec_lab(p.spec).Config, rest))  # the config without its seeds
        groups.setdefault(key, []).append((first, n, p))
    runs: list[tuple[int, SweepRun]] = []
    order = {p.hash: i for i, p in enumerate(points)}
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        chunk: list[tuple[int, int, SweepPoint]] = []
        for member in members + [None]:  # None flushes the last chunk
            start, total = (chunk[0][0], sum(m[1] for m in chunk)) if chunk else (0, 0)
            if member is not None and chunk and member[0] == start + total and total + member[1] <= max_seeds:
                chunk.append(member)
                continue
            if chunk:
                runs.append((min(order[m[2].hash] for m in chunk), _folded(chunk, start, total, allow_large)))
            chunk = [member] if member is not None else []
    return [run for _, run in sorted(runs, key=lambda r: r[0])]


def _span(point: SweepPoint) -> tuple[int, int]:
    first, n = _seed_range(point)
    return first, first + n


def _folded(chunk: list[tuple[int, int, SweepPoint]], start: int, total: int, allow_large: bool) -> SweepRun:
    from .runner import check_size

    if len(chunk) == 1:
        p = chunk[0][2]
        return SweepRun(p.hash, p.spec, (p,), (tuple(range(start, start + total)),))
    head = chunk[0][2].spec
    spec = RunSpec(lab=head.lab, overrides=deep_merge(head.overrides, {"seed": start, "n_seeds": total}),
                   name=f"{chunk[0][2].label} .. ({total} seeds)")
    config = spec_config(spec)
    check_size(spec_lab(head), config, None, allow_large)
    spec_lab(head).check(config)
    return SweepRun(config_hash(config), spec, tuple(m[2] for m in chunk),
                    tuple(tuple(range(m[0], m[0] + m[1])) for m in chunk))


def point_label(values: dict[str, Any]) -> str:
    """``train.lr_stage2=0.01,seed=1``: a point's axis values, floats in %g."""
    return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def point_lines(values: dict[str, Any]) -> tuple[str, ...]:
    """A point's axis values one per line, as :func:`point_label` writes each, under the
    axis's last dotted name unless two axes share it (then in full): ``("lr_stage2=0.01",
    "seed=1")``, the header of the point's column in the sweep report."""
    short = {k: k.rsplit(".", 1)[-1] for k in values}
    if len(set(short.values())) < len(short):
        short = {k: k for k in values}
    return tuple(point_label({short[k]: v}) for k, v in values.items())


def check_distinct(points: list[SweepPoint]) -> None:
    """One line when two points have the same config (same hash): they would share a run."""
    repeated = len(points) - len({p.hash for p in points})
    if repeated:
        raise UserError(f"sweep: {repeated} points repeat another point's config (same hash); "
                        "remove the repeated axis values")


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file's shape (one-line UserError on any problem)."""
    data = load_yaml(path)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise UserError(f"sweep {path}: {loc}: {first['msg']}") from None
    from .executors import ExecutorOptions

    try:
        ExecutorOptions.model_validate(spec.executor)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise UserError(f"sweep {path}: executor{'.' + loc if loc else ''}: {first['msg'].removeprefix('Value error, ')}") from None
    if spec.config is not None and not spec.config.is_absolute():
        spec = spec.model_copy(update={"config": (Path(path).parent / spec.config).resolve()})
    return spec


def expand(spec: SweepSpec) -> list[dict[str, Any]]:
    """The points (axis -> value) of a sweep, in order: the product over the axis groups.
    The point count is checked against :data:`MAX_POINTS` from the axes' sizes, before any
    value is built."""
    sizes = {name: axis_size(name, form) for name, form in spec.axes.items()}
    zipped: dict[str, list[str]] = {}
    for group in spec.zip:
        for name in group:
            if name not in sizes:
                raise UserError(f"sweep zip {group}: {name!r} is not an axis; axes: {', '.join(sizes) or 'none'}")
            if name in zipped:
                raise UserError(f"sweep zip: axis {name!r} is in two zip groups")
            zipped[name] = group
        lengths = {name: sizes[name] for name in group}
        if len(set(lengths.values())) > 1:
            raise UserError(f"sweep zip {group}: axes must have equal lengths, got "
                            + ", ".join(f"{k}: {v}" for k, v in lengths.items()))
    group_sizes = {zipped.get(name, [name])[0]: size for name, size in sizes.items()}  # a zip group counts once
    count = math.prod(group_sizes.values())
    if count > MAX_POINTS:
        raise UserError(f"sweep: {count} points; at most {MAX_POINTS} (split the sweep)")
    values = {name: axis_values(name, form) for name, form in spec.axes.items()}
    groups: list[list[dict[str, Any]]] = []
    placed: set[int] = set()
    for name in values:
        group = zipped.get(name, [name])
        if id(group) in placed:
            continue
        placed.add(id(group))
        groups.append([dict(zip(group, row)) for row in zip(*(values[g] for g in group))])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*groups)]


def _config_value(config: BaseModel, dotted: str, raw: Any) -> Any:
    """The validated config's value at ``dotted`` (so YAML's ``1e308``, a string, is recorded
    as the float the run used); ``raw`` where the path does not lead to a plain value."""
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part, raw) if isinstance(node, dict) else getattr(node, part, raw)
    return node if isinstance(node, (int, float, str, bool, type(None), list)) else raw


SHAPE_FREE = ("seed",)  # top-level axes that change neither a run's sizes nor what the lab's checks test


@dataclass(frozen=True)
class _Shape:
    """The first valid point of a shape: its validated config, overrides and disk estimate."""

    config: Any
    overrides: dict[str, Any]
    disk_bytes: int

    def assigned(self, free: dict[str, Any]) -> Any:
        """The shape's config with the free values assigned (validated by pydantic), or None
        when one is refused (the caller validates in full for the one-line error)."""
        config = self.config.model_copy()
        try:
            for key, value in free.items():
                setattr(config, key, value)
        except ValidationError:
            return None
        return config


def plan(spec: SweepSpec, out: str | Path | None = None, allow_large: bool = False) -> list[SweepPoint]:
    """Every point as a validated RunSpec (config file < set < axes over the preset), after
    the lab's own checks and the size check ``stagewise run`` makes (memory per run; the
    disk of all runs together at ``out`` when given); UserError with one line per bad point
    (at most 5 shown).

    Cost is proportional to the work. A point's *shape* is its axis values other than
    :data:`SHAPE_FREE` (top-level fields that change neither a run's sizes nor what the
    lab's checks test: a check tests the first member's data the same way). The first point
    of a shape is validated in full, size-checked and checked by the lab; the others copy its
    validated config and assign their seed, which pydantic validates as a field assignment.
    Point configs are read-only (they share the shape's nested models).
    """
    from ..progress import Progress
    from .runner import check_disk, check_size

    lab = get_lab(spec.lab)
    base = lab.preset_overrides(spec.preset)
    if spec.config is not None:
        base = deep_merge(base, load_yaml(spec.config))
    base = deep_merge(base, dotted_overrides(lab.Config, spec.set_, base, what="sweep set"))
    points = expand(spec)
    for name in spec.axes:  # key errors once, not once per point
        dotted_overrides(lab.Config, {name: None}, base, what="sweep axis")
    assign = bool(lab.Config.model_config.get("validate_assignment"))
    out_points, problems = [], []
    shapes: dict[str, _Shape | UserError] = {}  # a shape's first valid point, or the UserError its checks raised
    disk = 0
    with Progress(len(points), "planning", unit="points", lazy_bar=True) as shown_progress:  # a sign of life on big sweeps
        for values in points:
            shown_progress.advance()
            label = point_label(values) or "(no axes)"
            shape = repr(sorted((k, repr(v)) for k, v in values.items() if k not in SHAPE_FREE))
            known = shapes.get(shape)
            if isinstance(known, UserError):
                problems.append(f"sweep point {label}: {known.messages[0]}")
                continue
            free = {k: values[k] for k in SHAPE_FREE if k in values}
            config = known.assigned(free) if known is not None and assign else None
            if config is not None and known is not None:  # (a config comes only from a known shape)
                overrides = {**known.overrides, **free}
            else:  # the shape's first point, or a free value the assignment refused: full validation, one-line error
                overrides = deep_merge(base, dotted_overrides(lab.Config, values, base, what="sweep axis"))
                try:
                    config = validate(lab.Config, overrides)
                except UserError as err:
                    problems.append(f"sweep point {label}: {err.messages[0]}")
                    continue
            if known is None:
                try:
                    est = check_size(lab, config, None, allow_large)  # memory: refused before the lab's checks
                    lab.check(config)
                except UserError as err:
                    shapes[shape] = err
                    problems.append(f"sweep point {label}: {err.messages[0]}")
                    continue
                known = shapes[shape] = _Shape(config, overrides, est.disk_bytes)
            disk += known.disk_bytes
            run = RunSpec(lab=spec.lab, preset=None, overrides=overrides, name=label)
            typed = {name: _config_value(config, name, value) for name, value in values.items()}
            out_points.append(SweepPoint(typed, run, config_hash(config), config))
    if problems:
        shown = problems[:5] + ([f"... and {len(problems) - 5} more bad points"] if len(problems) > 5 else [])
        raise UserError(*shown)
    check_distinct(out_points)
    if out is not None:
        check_disk(disk, f"{len(out_points)} runs", Path(out), allow_large)
    return out_points
