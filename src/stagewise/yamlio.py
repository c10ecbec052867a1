"""Reading YAML that users give: bounded (file size, alias expansion, nesting depth) so a
few hundred hostile bytes cannot exhaust memory, and every problem is one line of a
:class:`~stagewise.errors.UserError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import UserError, readable_file

MAX_YAML_BYTES = 1 << 20
"""Largest ``--config`` file read (1 MiB)."""

MAX_YAML_NODES = 100_000
"""Most values one YAML document may hold with its aliases expanded (a 'billion laughs'
document is a few hundred bytes and expands to 10^9 values)."""

MAX_YAML_DEPTH = 64
"""Deepest nesting of lists and mappings in one YAML document."""

class YamlLimit(Exception):
    """A YAML document past one of the limits (size, nesting, recursive alias)."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that checks each composed document against :data:`MAX_YAML_NODES` and
    :data:`MAX_YAML_DEPTH`, counting every alias as a copy of what it refers to."""

    def compose_document(self):  # noqa: D102 (PyYAML hook)
        node = super().compose_document()
        if node is not None:
            _expanded_size(node, 0, {}, set())
        return node


def _expanded_size(node: yaml.Node, depth: int, done: dict[int, tuple[int, int]], active: set[int]) -> tuple[int, int]:
    """(values, height) of ``node`` with aliases expanded; each shared node is visited once."""
    key = id(node)
    if key in done:
        size, height = done[key]
    else:
        if key in active:
            raise YamlLimit("an alias refers to a list or mapping that contains it (recursive alias)")
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        active.add(key)
        size, height = 1, 0
        for child in children:
            if depth + 1 > MAX_YAML_DEPTH:
                raise YamlLimit(f"nested deeper than {MAX_YAML_DEPTH} levels")
            child_size, child_height = _expanded_size(child, depth + 1, done, active)
            size, height = size + child_size, max(height, child_height + 1)
            if size > MAX_YAML_NODES:
                raise YamlLimit(f"more than {MAX_YAML_NODES} values once aliases are expanded")
        active.discard(key)
        done[key] = size, height
    if depth + height > MAX_YAML_DEPTH:
        raise YamlLimit(f"nested deeper than {MAX_YAML_DEPTH} levels")
    return size, height


def safe_yaml(text: str) -> Any:
    """``yaml.safe_load`` within the limits; raises yaml.YAMLError, YamlLimit or ValueError
    (e.g. an integer of more than 4300 digits)."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise YamlLimit(f"nested deeper than {MAX_YAML_DEPTH} levels") from None


def _read_text(path: Path, label: str = "--config") -> str:
    """The text of a --config file (``label``: the option that named it); one-line UserError when
    it is not a readable text file."""
    readable_file(path, MAX_YAML_BYTES, kind="a YAML file", label=f"{label} ", folder="directory")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{label} {path}: cannot be read ({err.strerror or err})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(f"{label} {path}: not a text YAML file (not UTF-8: byte 0x{raw[err.start]:02x} "
                        f"at position {err.start})") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """`` at line L, column C: problem`` of a YAML error."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(err, "problem", None) or "invalid YAML"
    return f"{where}: {problem}"


def load_yaml(path: str | Path, label: str = "--config") -> dict[str, Any]:
    """Read a YAML mapping; one-line UserError (naming the option ``label``) on a missing, binary,
    oversized or bad file (aliases are bounded: see :data:`MAX_YAML_NODES`)."""
    path = Path(path)
    text = _read_text(path, label)
    try:
        data = safe_yaml(text)
    except yaml.reader.ReaderError as err:
        code = ord(err.character) if isinstance(err.character, str) else err.character
        raise UserError(f"{label} {path}: not a text YAML file (character #x{code:04x} at position {err.position})") from None
    except yaml.YAMLError as err:
        raise UserError(f"{label} {path} is not valid YAML{_yaml_problem(err)}") from None
    except (YamlLimit, ValueError) as err:
        raise UserError(f"{label} {path}: {str(err).split('; ')[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{label} {path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data
