"""Configuration: the pydantic v2 base model, YAML files, ``--set a.b=value`` overrides
(parsed in :mod:`stagewise.overrides`), commented-YAML rendering and a stable config hash.

Resolution order (later wins): the lab's defaults < preset < ``--config F.yaml`` <
``--set`` overrides < ``--seeds``. Everything is validated before any work starts; every
bad value becomes one line of a :class:`~stagewise.errors.UserError`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from .errors import UserError
from .overrides import _did_you_mean, _members, _parse_overrides, _submodel, current_names
from .overrides import dotted_overrides, parse_overrides  # noqa: F401  (re-exported: the public names)
from .yamlio import load_yaml

MAX_STEPS = 10**9
"""Upper bound of every step count of every lab (a larger one is a typo, not a plan)."""

MAX_RECORD_STEP = 2**63 - 1
"""Upper bound of the step a record carries when someone else's training names it (a tracked
run's ``Tracker.step``, its explicit schedule): records store steps as int64."""


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (a Python int, a numpy or 0-d torch integer;
    never a bool or a float), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None

MAX_SEED = 2**62
"""Upper bound (exclusive) of every seed: seeds are stored as int64 (the metrics' seed column,
seed tensors) and labs offset them (seed blocks, ensembles of up to a few thousand members),
so a seed plus any offset stays far inside int64 (a larger one is refused, not an OverflowError
after a run folder was made)."""

MAX_SHOWN = 120
"""Longest rendering of a bad value in an error line (longer ones end in '...')."""

STRICT_BOOL = "strict_bool"
"""Error type of a boolean given where a config field wants another type."""

ModelT = TypeVar("ModelT", bound=BaseModel)
"""A config model class: validate/resolve/materialize return an instance of the class given."""


def _threads(value: int | str) -> int | str:
    if isinstance(value, int) and value < 1:  # validated as int | "auto": the int case
        raise ValueError("must be >= 1 or auto")
    return value


Threads = Annotated[int | Literal["auto"], AfterValidator(_threads)]
"""A CPU thread count for a lab's trainer: a positive int or "auto" (the lab decides)."""


def available_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``: a SLURM allocation, a
    container's cpuset, ``taskset``), not the machine's count: what ``threads: auto`` may use.
    It does not follow the machine's load, on purpose: a run's thread count (and with it the
    order of its floating-point sums) would then depend on what else was running; on a busy
    machine pass ``--set train.threads=1`` (docs/usage.md "Threads": what was measured)."""
    import os

    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)

def _interval(value: int | str) -> int | str:
    if isinstance(value, int) and value > MAX_STEPS:  # validated as int | "auto": the int case
        raise ValueError(f"must be less than or equal to {MAX_STEPS} (or auto)")
    return _threads(value)


IntervalOrAuto = Annotated[int | Literal["auto"], AfterValidator(_interval)]
"""A step interval: a positive int or "auto" (the lab picks one from the run's length)."""


class ConfigModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are re-validated on
    assignment, and a boolean is never taken for a number (YAML reads ``no``, ``off``,
    ``true`` as booleans, which pydantic would otherwise turn into 0 or 1)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    PATH: ClassVar[str] = ""
    """Dotted path of this section in the lab's config ("train"), for messages."""
    RENAMED: ClassVar[dict[str, str]] = {}
    """Old field name -> new name. The old name is still accepted (in YAML, ``--set``, presets
    and old run folders) with a one-line deprecation note, and it stays the key in the config
    hash, so the hash of every config made before the rename is unchanged. Both names in one
    layer (or in two ``--set``) are refused: they are one setting."""
    RENAMED_KEYS: ClassVar[dict[str, dict[str, str]]] = {}
    """Mapping-valued field -> {old key: new key} for its entries (e.g. ``experiment.grid.eta1``),
    accepted and hashed like :attr:`RENAMED`."""
    ADDED: ClassVar[tuple[str, ...]] = ()
    """Fields added after runs existed: at their default they are left out of the config hash
    (and need no key in an old config.yaml), so every config made before the field keeps its hash."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """Old names in ``data`` under the new ones (:func:`~stagewise.overrides.current_names`;
        :func:`validate` and :func:`resolve` do this first, with full paths, for every layer)."""
        if not (cls.RENAMED or cls.RENAMED_KEYS):
            return data
        try:
            return current_names(cls, data, f"{cls.PATH}." if cls.PATH else "")
        except UserError as err:
            raise ValueError(err.messages[0]) from None

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_non_bool(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        problem = _bool_problem(field.annotation, value) if field is not None else None
        if problem is not None:
            sub, shown, message = problem
            raise PydanticCustomError(STRICT_BOOL, "{message}", {"message": message, "sub": sub, "value": shown})
        return value


# ------------------------------------------------------------------- strict booleans


def _admits_bool(annotation: Any) -> bool:
    for member in _members(annotation):
        if member is bool or member is Any:
            return True
        if get_origin(member) is Literal and any(isinstance(a, bool) for a in get_args(member)):
            return True
    return False


def _describe(annotation: Any) -> str:
    """``an integer``, ``a number or null``, ``an integer or 'auto'`` ..."""
    names = {int: "an integer", float: "a number", str: "a string", Path: "a path", type(None): "null"}
    words = []
    for member in _members(annotation):
        if member in names:
            words.append(names[member])
        elif get_origin(member) is Literal:
            words.append(" or ".join(repr(a) for a in get_args(member)))
        elif get_origin(member) in (list, tuple, set, frozenset):
            words.append("a list")
        elif get_origin(member) is dict:
            words.append("a mapping")
        else:
            words.append(getattr(member, "__name__", str(member)))
    return " or ".join(sorted(set(words), key=words.index))


def _items(annotation: Any, value: list | tuple) -> list[tuple[int, Any]]:
    """(index, item annotation) of a list/tuple value under a list/tuple annotation."""
    containers = [m for m in _members(annotation) if get_origin(m) in (list, tuple, set, frozenset)]
    if len(containers) != 1 or not get_args(containers[0]):
        return []
    args = get_args(containers[0])
    if get_origin(containers[0]) is not tuple or (len(args) == 2 and args[1] is Ellipsis):
        return [(i, args[0]) for i in range(len(value))]
    return list(zip(range(len(value)), args))


def _bool_problem(annotation: Any, value: Any, sub: str = "") -> tuple[str, Any, str] | None:
    """(sub-key, shown value, message) when ``value`` holds a boolean where ``annotation``
    wants something else (also inside lists, tuples and mapping values), else None."""
    if isinstance(value, bool):
        return None if _admits_bool(annotation) else (sub, value, f"must be {_describe(annotation)}, not a boolean")
    if isinstance(value, (list, tuple)):
        for i, item_type in _items(annotation, value):
            if isinstance(value[i], bool) and not _admits_bool(item_type):
                return sub, value, f"item {i} must be {_describe(item_type)}, not a boolean"
        return None
    mappings = [m for m in _members(annotation) if get_origin(m) is dict and len(get_args(m)) == 2]
    if isinstance(value, dict) and len(mappings) == 1:
        for key, item in value.items():
            found = _bool_problem(get_args(mappings[0])[1], item, f"{sub}.{key}")
            if found is not None:
                return found
    return None


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; returns a new dict, inputs untouched."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _format_error(err: Mapping[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown key '{loc}'"
    value = err.get("input")
    msg = err["msg"]
    ctx = err.get("ctx") or {}
    if kind == STRICT_BOOL:  # names the entry of a mapping field, even for a mapping input
        return f"{loc}{ctx['sub']}={_shown(ctx['value'])}: {msg}"
    shown = _shown(value) if not isinstance(value, dict) else "{...}"
    if kind == "literal_error" and "expected" in ctx:
        msg = f"must be one of {ctx['expected']}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif msg.startswith("Input should be "):
        msg = "must be " + msg[len("Input should be "):]
    if not loc or isinstance(value, dict) or msg.startswith(f"{loc}="):  # the check names its own key
        return msg
    return f"{loc}={shown}: {msg}"


def _shown(value: Any) -> str:
    """A value as JSON (characters as they are, not escaped), at most MAX_SHOWN long."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (ValueError, RecursionError):  # a circular value
        text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def _field_loc(cls: type[BaseModel], loc: tuple) -> tuple:
    """The part of an error location that names config fields (drops union-member tags
    such as ``int`` or ``literal['auto']`` that pydantic appends)."""
    model: type[BaseModel] | None = cls
    out = []
    for part in loc:
        if isinstance(part, int):  # a list index
            out.append(part)
        elif model is not None and part in model.model_fields:
            out.append(part)
            model = _submodel(model.model_fields[part].annotation)
        else:  # a union member's tag: the field ends here
            break
    return tuple(out)


def validate(cls: type[ModelT], data: dict[str, Any]) -> ModelT:
    """Build ``cls`` from ``data``; every problem becomes one line of a UserError (the
    alternatives of a union field are merged into one line)."""
    try:
        return cls.model_validate(current_names(cls, data))
    except ValidationError as exc:
        lines: dict[tuple, str] = {}
        for err in exc.errors():
            if err["type"] != "extra_forbidden":
                err = {**err, "loc": _field_loc(cls, tuple(err["loc"]))}
            line = _format_error(err)
            if err["type"] == "extra_forbidden":
                parent: type[BaseModel] | None = cls
                for part in err["loc"][:-1]:
                    parent = _submodel(parent.model_fields[part].annotation) if parent and part in parent.model_fields else None
                if parent is not None:
                    line += _did_you_mean(str(err["loc"][-1]), list(parent.model_fields))
            key = tuple(err["loc"])
            if key in lines and err["type"] != "extra_forbidden":  # another alternative of a union
                lines[key] += " or " + line.split(": ", 1)[-1]
            else:
                lines[key] = line
        raise UserError(*lines.values()) from None


def resolve(
    cls: type[ModelT],
    preset: dict[str, Any] | None = None,
    file: str | Path | None = None,
    sets: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> ModelT:
    """Defaults < preset < file < --set < extra (e.g. ``{"n_seeds": 8}``), validated."""
    data: dict[str, Any] = current_names(cls, copy.deepcopy(preset or {}))
    if file is not None:
        file_data = current_names(cls, load_yaml(file))
        # unknown keys reported against the file (with ``extra`` over it: a rule across sections sees the forced values)
        validate(cls, deep_merge(deep_merge(data, file_data), current_names(cls, extra or {})))
        data = deep_merge(data, file_data)
    errors: list[str] = []
    if sets:
        overrides, errors = _parse_overrides(cls, sets, data)
        data = deep_merge(data, overrides)
    if extra:
        data = deep_merge(data, current_names(cls, extra))
    try:
        config = validate(cls, data)
    except UserError as err:  # report bad keys and bad values together
        raise UserError(*errors, *err.messages) from None
    if errors:
        raise UserError(*errors)
    return config


# ---------------------------------------------------------------------------- output
def _legacy_keys(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    """``dumped`` (``model``'s JSON dump) with renamed fields under their old names and fields
    added later (:attr:`ConfigModel.ADDED`) left out at their defaults, recursively."""
    back = {new: old for old, new in getattr(type(model), "RENAMED", {}).items()}
    entries = getattr(type(model), "RENAMED_KEYS", {})
    out = {}
    added = getattr(type(model), "ADDED", ())
    fields = type(model).model_fields
    for key, value in dumped.items():
        if key in added and getattr(model, key) == fields[key].get_default(call_default_factory=True):
            continue  # a field added later, at its default: hashed as before it existed
        sub = getattr(model, key, None)
        if isinstance(sub, BaseModel) and isinstance(value, dict):
            value = _legacy_keys(sub, value)
        elif key in entries and isinstance(value, dict):
            old_of = {new: old for old, new in entries[key].items()}
            value = {old_of.get(k, k): v for k, v in value.items()}
        out[back.get(key, key)] = value
    return out


def canonical(config: BaseModel) -> dict[str, Any]:
    """The form the config hash is taken of: the JSON dump, with every derived field whose
    value equals its derivation (:meth:`RunBase.derived`) set to null, and renamed fields under
    their old names (:attr:`ConfigModel.RENAMED`). So a config.yaml that writes the derived
    values out hashes like one that leaves them null, and configs made before a rename keep
    their hash."""
    dumped = config.model_dump(mode="json")
    derived = config.derived() if isinstance(config, RunBase) else {}
    for path, value in derived.items():
        *head, leaf = path.split(".")
        node = dumped
        for part in head:
            node = node[part]
        if node.get(leaf) is not None and json.loads(json.dumps(value)) == node[leaf]:
            node[leaf] = None
    return _legacy_keys(config, dumped)


def config_hash(config: BaseModel) -> str:
    """Stable 16-hex-digit hash of the resolved config (key order independent), taken of
    :func:`canonical` (derived values as null, renamed fields under their old names)."""
    blob = json.dumps(canonical(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def materialize(config: ModelT) -> ModelT:
    """The config with every derived default (a null meaning "derive it") replaced by the
    value the run uses (:meth:`RunBase.derived`): what config.yaml stores. Same hash."""
    derived = config.derived() if isinstance(config, RunBase) else {}
    if not derived:
        return config
    dumped = config.model_dump(mode="json")
    for path, value in derived.items():
        *head, leaf = path.split(".")
        node = dumped
        for part in head:
            node = node[part]
        if node.get(leaf) is None:
            node[leaf] = value
    return type(config).model_validate(dumped)


def to_yaml(config: BaseModel) -> str:
    """Plain YAML of the resolved config (what a run directory stores), derived defaults
    written as the values used (:func:`materialize`)."""
    return yaml.safe_dump(materialize(config).model_dump(mode="json"), sort_keys=False)


def to_commented_yaml(config: BaseModel, indent: int = 0) -> str:
    """YAML with each field's description as a comment above it."""
    lines: list[str] = []
    pad = " " * indent
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        if field.description:
            for text in field.description.splitlines():
                lines.append(f"{pad}# {text}")
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            lines.append(to_commented_yaml(value, indent + 2))
        else:
            dumped = yaml.safe_dump({name: _jsonable(value)}, default_flow_style=True, width=1000).strip()
            lines.append(f"{pad}{dumped[1:-1] if dumped.startswith('{') else dumped}")
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


# ---------------------------------------------------------------------- shared bases
SourceKind = Literal["train", "tracked", "checkpoint", "trajectory"]
SOURCE_KINDS: tuple[str, ...] = ("train", "tracked", "checkpoint", "trajectory")


class ProbeSource(ConfigModel):
    """Where a run's model comes from (issues 29, 39), the ``source`` section of every lab
    that declares a probe (``Lab.probe``): the lab trains it (``train``), or the lab only
    measures a model trained elsewhere: a researcher's own training probed while it runs
    (``tracked``, :mod:`stagewise.orchestrate.track`), one saved model (``checkpoint``, at
    ``source.step``) or an ordered series of them (``trajectory``,
    :mod:`stagewise.orchestrate.trajectory`). Outside ``train`` the lab's other sections
    declare what is measured (the probe sets), and ``source.settings`` records the
    researcher's own training settings as given. A lab subclasses it for settings of its own
    probe (the lm lab: attention spectra, a category function)."""

    ADDED = ("schedule", "log_until", "probe_steps")
    kind: SourceKind = Field("train", description="train: the lab trains the model [default]; tracked: a researcher's own\n"
                             "training, probed while it runs; checkpoint: one saved model at source.step;\n"
                             "trajectory: the saved models in source.checkpoints, in order [ours, issue 29]")
    checkpoints: list[str] = Field(default_factory=list, description="trajectory: the model folders in training order")
    steps: list[int] = Field(default_factory=list, description="trajectory: each checkpoint's training step (default: the\n"
                             "global_step of its trainer_state.json, else its position in the list)")
    step: int = Field(0, ge=0, le=MAX_STEPS, description="checkpoint: the training step its records are logged at")
    epoch: float | None = Field(None, ge=0, allow_inf_nan=False, description="checkpoint: its training epoch (records' epoch;\n"
                                "null: the step)")
    schedule: Literal["every", "log", "steps"] = Field("every", description="tracked: when to probe: every (every k\n"
                                                       "steps, source.every; 0: the budget rule), log (step 0 and the powers of two up\n"
                                                       "to source.log_until, then every k steps), steps (source.probe_steps) [ours, issue 39]")
    every: int = Field(0, ge=0, le=MAX_STEPS, description="tracked: probe every k optimizer steps (0: as often as\n"
                       "source.budget allows, plus where the caller asks: training's start and end, epoch ends)")
    log_until: int = Field(0, ge=0, le=MAX_STEPS, description="tracked, schedule=log: its last power of two (512:\n"
                           "Pythia's; 0 with the other schedules)")
    probe_steps: list[int] = Field(default_factory=list, description="tracked, schedule=steps: the steps to probe at\n"
                                   "(increasing)")
    budget: float = Field(0.1, gt=0, le=1, allow_inf_nan=False, description="tracked, every=0: probe while the time spent\n"
                          "probing, the next probe and one kept for the final record stay within budget x the training time")
    settings: dict[str, Any] = Field(default_factory=dict, description="the researcher's own training settings, recorded\n"
                                     "as given (optimizer, rate, schedule, ...); not read by stagewise")

    @model_validator(mode="after")
    def _check(self):
        if self.kind != "trajectory" and (self.checkpoints or self.steps):
            raise ValueError(f"source.checkpoints/source.steps: only for source.kind=trajectory (this is {self.kind})")
        if self.kind == "trajectory":
            if not self.checkpoints:
                raise ValueError("source.kind=trajectory needs source.checkpoints=[folder, ...] (at least one)")
            if self.steps and len(self.steps) != len(self.checkpoints):
                raise ValueError(f"source.steps has {len(self.steps)} entries for {len(self.checkpoints)} checkpoints")
            if any(b <= a for a, b in zip(self.steps, self.steps[1:])):
                raise ValueError(f"source.steps={self.steps}: steps increase along the trajectory")
            if any(s < 0 or s > MAX_RECORD_STEP for s in self.steps):
                raise ValueError(f"source.steps: {next(s for s in self.steps if s < 0 or s > MAX_RECORD_STEP)} is out of "
                                 f"range (steps are 0 to {MAX_RECORD_STEP}, a 64-bit record step)")
        if self.kind == "train" and (self.settings or self.every or self.budget != 0.1):
            raise ValueError("source.settings/every/budget: only when the model is trained elsewhere (source.kind != train)")
        if self.kind != "tracked" and (self.schedule != "every" or self.log_until or self.probe_steps):
            raise ValueError(f"source.schedule/log_until/probe_steps: only for source.kind=tracked (this is {self.kind})")
        if (self.schedule == "log") != (self.log_until > 0):
            raise ValueError(f"source.log_until={self.log_until}: >= 1 with source.schedule=log, 0 otherwise "
                             f"(this is {self.schedule})")
        if (self.schedule == "steps") != bool(self.probe_steps) or (self.probe_steps and self.every):
            raise ValueError(f"source.probe_steps: the steps of source.schedule=steps (at least one; source.every=0), "
                             f"none otherwise (this is {self.schedule} with {len(self.probe_steps)} steps, every={self.every})")
        if any(not 0 <= s <= MAX_RECORD_STEP for s in self.probe_steps) or any(b <= a for a, b in zip(self.probe_steps,
                                                                                                  self.probe_steps[1:])):
            raise ValueError(f"source.probe_steps: whole numbers from 0 to {MAX_RECORD_STEP}, increasing")
        return self


class RunBase(ConfigModel):
    """Fields every lab's top-level config has: the ensemble's seeds and the device.

    A lab subclasses it and may redeclare a field to change its default or bounds.
    """

    seed: int = Field(0, ge=0, lt=MAX_SEED, description="first seed; the ensemble runs seeds seed .. seed + n_seeds - 1 (below 2**62)")
    n_seeds: int = Field(1, ge=1, le=4096, description="ensemble size, computed in one batched pass (--seeds K)")
    device: Literal["cpu", "cuda", "auto"] = Field(
        "cpu", description="cpu (default for the theory labs), cuda, or auto (cuda when available)")

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.n_seeds)]

    def derived(self) -> dict[str, Any]:
        """Derived defaults: dotted path -> the value a null there stands for (e.g.
        ``{"train.lr_stage1": 0.2 / sqrt(d)}``), computed from this config. A lab overrides it;
        a path it cannot derive yet (e.g. a data file that does not exist) is left out."""
        return {}


class TrainBase(ConfigModel):
    """Training fields every lab shares: logging, checkpoints, threads, optimizer constants."""

    log_every: int = Field(1, ge=1, le=MAX_STEPS, description="log metrics every k steps (stage ends and the last step are always logged)")
    checkpoint_every: int = Field(100, ge=1, le=MAX_STEPS, description="safetensors checkpoint every k steps (for --resume)")
    threads: Threads = Field("auto", description="CPU threads for torch while training; auto: the lab decides")
    betas: tuple[float, float] = Field((0.9, 0.999), description="adam/adamw betas")
    adam_eps: float = Field(1e-8, gt=0, allow_inf_nan=False, description="adam/adamw epsilon")
    weight_decay: float = Field(0.01, ge=0, allow_inf_nan=False, description="adamw decoupled weight decay")

    @model_validator(mode="after")
    def _betas(self):
        b1, b2 = self.betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"train.betas={[b1, b2]}: each must be in [0, 1)")
        return self
