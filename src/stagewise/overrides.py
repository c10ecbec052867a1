"""``--set a.b=value`` overrides and the schema walking behind them: dotted keys checked
against a config model (an unknown key suggests the closest full dotted paths, across
sections: ``eta`` -> ``train.eta``), values parsed as YAML, and
one entry of a mapping-valued field set on top of its default. Used by
:mod:`stagewise.config` (``resolve``) and by sweep files (``dotted_overrides``)."""

from __future__ import annotations

import copy
import difflib
import warnings
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from .errors import RenamedOption, UserError
from .yamlio import YamlLimit, safe_yaml


def _members(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union (``X | Y``, ``Optional[X]``), Annotated unwrapped."""
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(m for arg in get_args(annotation) for m in _members(arg))
    return (annotation,)


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


SUGGEST_CUTOFF = 0.6
"""Least similarity (difflib ratio, 0..1) of a key to a config path for it to be suggested."""

SUGGEST_MARGIN = 0.05
"""Paths within this similarity of the best one are suggested with it."""

WORD_MATCH = 0.9
"""Similarity of a key to a field name it is one ``_``-separated word of (``vocab`` in
``vocab_size``): below an exact name, above most typos."""

MAX_SUGGESTIONS = 3
"""At most this many paths in one 'did you mean' hint."""


def _did_you_mean(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def config_paths(cls: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted path of the config model ``cls``, sections and leaves, depth first:
    ``["seed", ..., "train", "train.eta0", "train.eta", ...]`` (a mapping-valued field is a
    leaf: its entries are not fields)."""
    out = []
    for name, field in cls.model_fields.items():
        path = f"{prefix}{name}"
        out.append(path)
        sub = _submodel(field.annotation)
        if sub is not None:
            out += config_paths(sub, f"{path}.")
    return out


def legacy_names(cls: type[BaseModel], prefix: str = "") -> dict[str, list[str]]:
    """Dotted path -> the old dotted paths of that field (``ConfigModel.RENAMED``), so that
    a misspelt old name still suggests the new one: ``{"train.lr_stage1": ["train.eta0"]}``."""
    out: dict[str, list[str]] = {}
    for old, new in getattr(cls, "RENAMED", {}).items():
        out.setdefault(f"{prefix}{new}", []).append(f"{prefix}{old}")
    for name, field in cls.model_fields.items():
        sub = _submodel(field.annotation)
        if sub is not None:
            out.update(legacy_names(sub, f"{prefix}{name}."))
    return out


def _note_renamed(where: str, old: str, new: str) -> None:
    warnings.warn(f"{where}{old} is now {where}{new} (same meaning; the old name still works)", RenamedOption, stacklevel=4)


def current_key(cls: type[BaseModel], key: str) -> str:
    """A dotted ``--set`` key with old field names (``RENAMED``, ``RENAMED_KEYS``) replaced by
    the current ones, one note each: ``train.eta0`` -> ``train.lr_stage1``."""
    parts = key.split(".")
    model: Any = cls
    for depth, part in enumerate(parts):
        if model is None:
            return ".".join(parts)
        where = ".".join(parts[:depth]) + "." if depth else ""
        new = getattr(model, "RENAMED", {}).get(part)
        if new is not None:
            _note_renamed(where, part, new)
            parts[depth] = part = new
        if depth + 1 < len(parts) and part in getattr(model, "RENAMED_KEYS", {}):
            entry = model.RENAMED_KEYS[part].get(parts[depth + 1])
            if entry is not None:
                _note_renamed(f"{where}{part}.", parts[depth + 1], entry)
                parts[depth + 1] = entry
        field = getattr(model, "model_fields", {}).get(part)
        model = _submodel(field.annotation) if field is not None else None
    return ".".join(parts)


def current_names(cls: type[BaseModel] | _KeysOnly, data: Any, where: str = "") -> Any:
    """Nested config values with old field names replaced by the current ones (one note each),
    so that layers written with old and new names merge into one key: a preset's ``eta1``
    and a ``--set train.lr_stage1``. Giving both names in one layer is an error."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for old, new in getattr(cls, "RENAMED", {}).items():
        if old in out:
            if new in out:
                raise UserError(f"{where}{old} and {where}{new} are the same setting ({old} is its old name): give {new} only")
            _note_renamed(where, old, new)
            out[new] = out.pop(old)
    for name, keys in getattr(cls, "RENAMED_KEYS", {}).items():
        if isinstance(out.get(name), dict):
            out[name] = current_names(_KeysOnly(keys), out[name], f"{where}{name}.")
    for name, field in cls.model_fields.items() if hasattr(cls, "model_fields") else ():
        sub = _submodel(field.annotation)
        if sub is not None and name in out:
            out[name] = current_names(sub, out[name], f"{where}{name}.")
    return out


class _KeysOnly:
    """A stand-in model for the entries of a mapping-valued field: only ``RENAMED``."""

    def __init__(self, renamed: dict[str, str]):
        self.RENAMED = renamed


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _name_score(unknown: str, name: str) -> float:
    """Similarity of an unknown key part to a field name: difflib's ratio, or WORD_MATCH
    when it is one ``_``-separated word of the name."""
    return max(_ratio(unknown, name), WORD_MATCH if unknown in name.split("_") and unknown != name else 0.0)


def suggest_paths(cls: type[BaseModel], key: str, unknown: str) -> list[str]:
    """The full dotted paths of ``cls`` closest to ``key``, best first (at most
    MAX_SUGGESTIONS, those within SUGGEST_MARGIN of the best; none below SUGGEST_CUTOFF).
    ``unknown`` is the part of ``key`` that named no field. A path scores the larger of its
    similarity to the whole key (a typo: ``train.etta`` ~ ``train.eta``) and its last name's
    to ``unknown`` (a key in the wrong section or without one: ``eta`` ~ ``train.eta``,
    ``vocab`` ~ ``data.vocab_size``)."""
    legacy = legacy_names(cls)
    scored = sorted(((max(_ratio(key, path), _name_score(unknown, path.rsplit(".", 1)[-1]),
                          *(max(_ratio(key, old), _name_score(unknown, old.rsplit(".", 1)[-1])) for old in legacy.get(path, ()))),
                      path) for path in config_paths(cls)), key=lambda sp: -sp[0])  # stable: schema order on ties
    if not scored or scored[0][0] < SUGGEST_CUTOFF:
        return []
    best = scored[0][0]
    return [path for score, path in scored if score >= max(SUGGEST_CUTOFF, best - SUGGEST_MARGIN)][:MAX_SUGGESTIONS]


def _hint(paths: list[str]) -> str:
    """`` (did you mean 'a'?)`` / `` (did you mean 'a' or 'b'?)``; empty without paths."""
    if not paths:
        return ""
    quoted = [f"'{p}'" for p in paths]
    return f" (did you mean {', '.join(quoted[:-1]) + ' or ' if len(quoted) > 1 else ''}{quoted[-1]}?)"


def _dict_keys(annotation: Any) -> list[str] | None:
    """The allowed keys of a mapping-valued field (``[]``: any), or None if not a mapping."""
    mappings = [m for m in _members(annotation) if get_origin(m) is dict]
    if len(mappings) != 1:
        return None
    key_type = (get_args(mappings[0]) or (str,))[0]
    return [str(k) for k in get_args(key_type)] if get_origin(key_type) is Literal else []


def parse_overrides(cls: type[BaseModel], sets: list[str]) -> dict[str, Any]:
    """Turn ``["train.lr_stage2=0.1", "data.file=x.json"]`` into a nested dict.

    Keys are checked against the config schema (an unknown key suggests the closest full
    dotted paths, see :func:`suggest_paths`);
    values are parsed as YAML scalars/lists (``0.1``, ``true``, ``[1, 3]``, ``null``); an
    empty value is an error (write ``null``). A mapping-valued field takes one key at a time
    (``experiment.grid.t1=[100, 300]``).
    """
    out, errors = _parse_overrides(cls, sets)
    if errors:
        raise UserError(*errors)
    return out


def _check_key(cls: type[BaseModel], key: str) -> tuple[str | None, Any]:
    """(error message or None, the mapping field's default when the key names one entry of
    a mapping-valued field, else None)."""
    parts = key.split(".")
    model: type[BaseModel] = cls
    for depth, part in enumerate(parts):
        fields = list(model.model_fields)
        part = getattr(model, "RENAMED", {}).get(part, part)  # an old name: accepted (its note comes at validation)
        if part not in model.model_fields:
            where = ".".join(parts[:depth]) or "top level"
            hint = _hint(suggest_paths(cls, key, part))
            return f"--set {key}: unknown key '{part}' in {where}{hint}; allowed: {', '.join(fields)}", None
        if depth == len(parts) - 1:
            return None, None
        field = model.model_fields[part]
        sub = _submodel(field.annotation)
        if sub is None:
            keys = _dict_keys(field.annotation)
            section = ".".join(parts[:depth + 1])
            if keys is None or depth != len(parts) - 2:
                return f"--set {key}: '{section}' is a value, not a section", None
            if keys and parts[-1] not in keys and parts[-1] not in getattr(model, "RENAMED_KEYS", {}).get(part, {}):
                hint = _did_you_mean(parts[-1], keys)
                return f"--set {key}: unknown key '{parts[-1]}' in {section}{hint}; allowed: {', '.join(keys)}", None
            return None, field.get_default(call_default_factory=True)
        model = sub
    return None, None


def _parse_value(key: str, raw: str) -> tuple[Any, str | None]:
    """(value, error message or None) of the text after ``KEY=``: YAML, a plain string if it
    is not valid YAML; empty is an error (``null`` is written out)."""
    if not raw.strip():
        return None, f"--set {key}=: empty value; give a value or null"
    try:
        return safe_yaml(raw), None
    except yaml.YAMLError:
        return raw, None
    except (YamlLimit, ValueError) as err:
        return None, f"--set {key}: {str(err).split('; ')[0]}"


def _parse_overrides(cls: type[BaseModel], sets: list[str],
                     base: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(overrides of the well-formed items, one message per bad item).

    One entry of a mapping-valued field is set on top of that field's value in ``base``
    (the preset and file so far), or on its default when ``base`` lacks it.
    """
    out: dict[str, Any] = {}
    errors: list[str] = []
    spelled: dict[str, str] = {}  # current key -> how the first --set of it wrote it
    for item in sets:
        if "=" not in item:
            errors.append(f"--set {item!r}: expected KEY=VALUE, e.g. train.lr_stage2=0.05")
            continue
        key, raw = item.split("=", 1)
        written, key = key.strip(), current_key(cls, key.strip())
        first = spelled.setdefault(key, written)
        if first != written:  # an old and the current name of one setting: which one wins is not a guess to make
            old, new = (first, written) if first != key else (written, first)
            errors.append(f"--set {old} and --set {new} are the same setting ({old} is its old name): give {new} only")
            continue
        problem, mapping_default = _check_key(cls, key)
        value, bad_value = _parse_value(key, raw) if problem is None else (None, None)
        message = problem or bad_value
        if message:
            errors.append(message)
            continue
        _place(out, key, value, mapping_default, base)
    return out, errors


def _place(out: dict[str, Any], key: str, value: Any, mapping_default: Any, base: dict[str, Any] | None) -> None:
    """Put ``value`` at dotted ``key`` of ``out``; one entry of a mapping-valued field starts
    from that field's default when neither ``out`` nor ``base`` holds the mapping yet."""
    parts = key.split(".")
    node = out
    known: Any = base or {}  # the nested value of base along the key (any YAML value)
    for depth, part in enumerate(parts[:-1]):
        known = known.get(part) if isinstance(known, dict) else None
        if part not in node and depth == len(parts) - 2 and mapping_default is not None and known is None:
            node[part] = copy.deepcopy(mapping_default)
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def dotted_overrides(cls: type[BaseModel], items: dict[str, Any], base: dict[str, Any] | None = None,
                     what: str = "--set") -> dict[str, Any]:
    """Nested overrides from already-typed ``{"train.eta": 0.01, ...}`` (a sweep's ``set`` and
    axes), with the keys checked as ``--set`` checks them; one UserError line per bad key,
    ``what`` naming the source instead of ``--set``."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in items.items():
        problem, mapping_default = _check_key(cls, str(key))
        if problem:
            errors.append(problem.replace("--set ", f"{what} ", 1))
            continue
        _place(out, str(key), value, mapping_default, base)
    if errors:
        raise UserError(*errors)
    return out
