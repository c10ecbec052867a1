"""Configuration: the pydantic v2 base model, YAML files, ``--set a.b=value`` overrides,
commented-YAML rendering and a stable config hash.

Resolution order (later wins): the lab's defaults < preset < ``--config F.yaml`` <
``--set`` overrides < ``--seeds``. Everything is validated before any work starts; every
bad value becomes one line of a :class:`~stagewise.errors.UserError`.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import UserError


def _threads(value: int | str) -> int | str:
    if value != "auto" and value < 1:
        raise ValueError("must be >= 1 or auto")
    return value


Threads = Annotated[int | Literal["auto"], AfterValidator(_threads)]
"""A CPU thread count for a lab's trainer: a positive int or "auto" (the lab decides)."""


class ConfigModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are re-validated on
    assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---------------------------------------------------------------------------- loading
def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; one-line UserError on a missing file or bad YAML."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--config {path}: file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise UserError(f"--config {path} is not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"--config {path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; returns a new dict, inputs untouched."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside an annotation (``X`` or ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            found = _submodel(arg)
            if found is not None:
                return found
    return None


def _did_you_mean(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_overrides(cls: type[BaseModel], sets: list[str]) -> dict[str, Any]:
    """Turn ``["train.eta=0.1", "data.file=x.json"]`` into a nested dict.

    Keys are checked against the config schema (unknown keys suggest the closest name);
    values are parsed as YAML scalars/lists (``0.1``, ``true``, ``[1, 3]``, ``null``).
    """
    out, errors = _parse_overrides(cls, sets)
    if errors:
        raise UserError(*errors)
    return out


def _parse_overrides(cls: type[BaseModel], sets: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(overrides of the well-formed items, one message per bad item)."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    for item in sets:
        if "=" not in item:
            errors.append(f"--set {item!r}: expected KEY=VALUE, e.g. train.eta=0.05")
            continue
        key, raw = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        model: type[BaseModel] | None = cls
        for depth, part in enumerate(parts):
            fields = list(model.model_fields) if model is not None else []
            if model is None or part not in model.model_fields:
                where = ".".join(parts[:depth]) or "top level"
                hint = _did_you_mean(part, fields)
                errors.append(f"--set {key}: unknown key '{part}' in {where}{hint}; allowed: {', '.join(fields)}")
                break
            annotation = model.model_fields[part].annotation
            model = _submodel(annotation) if depth < len(parts) - 1 else None
            if depth < len(parts) - 1 and model is None:
                errors.append(f"--set {key}: '{'.'.join(parts[:depth + 1])}' is a value, not a section")
                break
        else:
            try:
                value = yaml.safe_load(raw) if raw.strip() else None
            except yaml.YAMLError:
                value = raw
            node = out
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
    return out, errors


def _format_error(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown key '{loc}'"
    value = err.get("input")
    shown = json.dumps(value, default=str) if not isinstance(value, dict) else "{...}"
    msg = err["msg"]
    ctx = err.get("ctx") or {}
    if kind == "literal_error" and "expected" in ctx:
        msg = f"must be one of {ctx['expected']}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif msg.startswith("Input should be "):
        msg = "must be " + msg[len("Input should be "):]
    if not loc or isinstance(value, dict):  # a section-level check names its own keys
        return msg
    return f"{loc}={shown}: {msg}"


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


def validate(cls: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    """Build ``cls`` from ``data``; every problem becomes one line of a UserError (the
    alternatives of a union field are merged into one line)."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        lines: dict[tuple, str] = {}
        for err in exc.errors():
            if err["type"] != "extra_forbidden":
                err = {**err, "loc": _field_loc(cls, tuple(err["loc"]))}
            line = _format_error(err)
            if err["type"] == "extra_forbidden":
                parent = cls
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
    cls: type[BaseModel],
    preset: dict[str, Any] | None = None,
    file: str | Path | None = None,
    sets: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> BaseModel:
    """Defaults < preset < file < --set < extra (e.g. ``{"n_seeds": 8}``), validated."""
    data: dict[str, Any] = copy.deepcopy(preset or {})
    if file is not None:
        file_data = load_yaml(file)
        validate(cls, deep_merge(data, file_data))  # unknown keys reported against the file
        data = deep_merge(data, file_data)
    errors: list[str] = []
    if sets:
        overrides, errors = _parse_overrides(cls, sets)
        data = deep_merge(data, overrides)
    if extra:
        data = deep_merge(data, extra)
    try:
        config = validate(cls, data)
    except UserError as err:  # report bad keys and bad values together
        raise UserError(*errors, *err.messages) from None
    if errors:
        raise UserError(*errors)
    return config


# ---------------------------------------------------------------------------- output
def config_hash(config: BaseModel) -> str:
    """Stable 16-hex-digit hash of the resolved config (key order independent)."""
    blob = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def to_yaml(config: BaseModel) -> str:
    """Plain YAML of the resolved config (what a run directory stores)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


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
class RunBase(ConfigModel):
    """Fields every lab's top-level config has: the ensemble's seeds and the device.

    A lab subclasses it and may redeclare a field to change its default or bounds.
    """

    seed: int = Field(0, ge=0, description="first seed; the ensemble runs seeds seed .. seed + n_seeds - 1")
    n_seeds: int = Field(1, ge=1, le=4096, description="ensemble size, computed in one batched pass (--seeds K)")
    device: Literal["cpu", "cuda", "auto"] = Field(
        "cpu", description="cpu (default for the theory labs), cuda, or auto (cuda when available)")

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.n_seeds)]


class TrainBase(ConfigModel):
    """Training fields every lab shares: logging, checkpoints, threads, optimizer constants."""

    log_every: int = Field(1, ge=1, description="log metrics every k steps (stage ends and the last step are always logged)")
    checkpoint_every: int = Field(100, ge=1, description="safetensors checkpoint every k steps (for --resume)")
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
