"""The commands labs declare (``Lab.commands``: name -> :class:`~stagewise.labs.contract.LabCommand`)
as commands of the `stagewise` app: ``stagewise NAME LAB [--preset P] [--config FILE] [--set
a.b=v ...] [--seeds K] [--json FILE]``, one per name whichever labs declare it.

The app (:mod:`stagewise.cli`, a :class:`WithLabCommands` group) asks for them only when a
command name is not its own or when it lists every command (``--help``), so the labs are
imported then and only then. A lab without the named command is a one-line error naming the
labs that have it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from .errors import UserError
from .runs.stops import signum_of

out_console = Console()


def plain_option_types() -> None:
    """Help shows a parameter's value type the way a reader types it: a flag none (typer prints
    ``<bool>``, as if ``--quick true`` were wanted), a repeatable option or a variadic argument
    its element type (``<str>``, given once per value; not ``<list[str]>``). Installed once on
    typer's option and argument classes."""
    from typer.core import TyperArgument, TyperOption

    for cls in (TyperOption, TyperArgument):
        shown = getattr(cls, "display_type_rich", None)
        if shown is None or getattr(shown, "stagewise_plain", False):
            continue
        cls.display_type_rich = _plain_type(shown)  # type: ignore[method-assign]


def _plain_type(shown: Any) -> Any:
    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False):
            return None
        text = shown(self, ctx)
        if isinstance(text, str) and text.startswith("<list[") and text.endswith("]>"):
            return f"<{text[len('<list['):-2]}>"
        return text

    display_type_rich.stagewise_plain = True  # type: ignore[attr-defined]
    return display_type_rich


class WithLabCommands(TyperGroup):
    """A group of the app's own commands and, found at first need, the commands labs declare
    (:func:`lab_commands`), listed after the command :attr:`listed_after`."""

    listed_after = "claims"
    _lab_commands_added = False

    def _add_lab_commands(self) -> None:
        if self._lab_commands_added:
            return
        self._lab_commands_added = True
        items = list(self.commands.items())
        at = next((i + 1 for i, (name, _) in enumerate(items) if name == self.listed_after), len(items))
        self.commands = dict(items[:at] + list(lab_commands(set(self.commands)).items()) + items[at:])

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:
            self._add_lab_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        self._add_lab_commands()
        return super().list_commands(ctx)

    def invoke(self, ctx: Any) -> Any:
        """A stop (SIGINT/SIGTERM) that no command turned into its own line leaves as
        :class:`Stopped`: click would turn it into a bare exit 130 (SIGTERM too), with nothing said."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as err:
            raise Stopped(signum_of(err)) from None


class Stopped(Exception):
    """A stop request that reached the CLI's top: ``main`` prints ``interrupted (SIG...)`` and
    exits 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def lab_commands(taken: set[str]) -> dict[str, Any]:
    """Name -> click command of every command the registered labs declare, in registry
    order, the help of the first lab that declares it; names in ``taken`` (the app's own)
    are left out."""
    from .labs import REGISTRY

    out: dict[str, Any] = {}
    for lab in REGISTRY.values():
        for name, command in lab.commands.items():
            if name not in taken and name not in out:
                out[name] = _click_command(name, command.help)
    return out


def _click_command(name: str, help_text: str) -> Any:
    """The click command ``stagewise NAME LAB ...`` (built by Typer, as the app's own are)."""

    def command(
        lab: str = typer.Argument(..., help="lab name, see `stagewise labs`"),
        preset: Optional[str] = typer.Option(None, "--preset", "-p", help="named preset, see `stagewise labs`"),
        config_file: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML file of config values"),
        sets: Optional[List[str]] = typer.Option(None, "--set", "-s", help="override one value: a.b=value (repeatable)"),
        seeds: Optional[int] = typer.Option(None, "--seeds", help="number of seeds (seed..seed+K-1)"),
        json_out: Optional[str] = typer.Option(None, "--json", help="also write the rows to this JSON file"),
    ) -> None:
        run_lab_command(name, lab, preset, config_file, sets or [], seeds, json_out)

    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    one.command(name, help=help_text)(command)
    return typer.main.get_command(one)


def run_lab_command(name: str, lab: str, preset: str | None, config_file: Path | None, sets: list[str],
                    seeds: int | None, json_out: str | Path | None) -> None:
    """Lab ``lab``'s command ``name`` on the resolved, checked config: its ``text()`` lines
    printed, its ``rows`` written to ``json_out`` when given (atomically). UserError (one line)
    for a lab without the command, ``--seeds`` below 1, a ``json_out`` that cannot be written
    (checked before the command runs: :func:`check_output_file`; a write that fails after it,
    e.g. a full disk, leaves no file), or what the config checks refuse."""
    from .config import resolve
    from .labs import REGISTRY, get_lab
    from .orchestrate.runner import available_memory

    value = get_lab(lab)
    command = value.commands.get(name)
    if command is None:
        having = [n for n, v in REGISTRY.items() if name in v.commands]
        what = REGISTRY[having[0]].commands[name].what if having else name
        raise UserError(f"lab '{lab}' declares no {what}; labs with {name}: {', '.join(having) or 'none'}")
    if seeds is not None and seeds < 1:
        raise UserError(f"--seeds {seeds}: must be >= 1")
    json_path = None if json_out is None else check_output_file(json_out, "--json")
    config = resolve(value.Config, value.preset_overrides(preset), config_file, sets,
                     {"n_seeds": seeds} if seeds is not None else None)
    value.check(config)
    report = command.run(config, available_memory())
    for line in report.text():
        out_console.print(line, highlight=False, markup=False, soft_wrap=True)
    if json_path is not None:
        rows = [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()} for row in report.rows]
        text = json.dumps({"lab": lab, "preset": preset, "rows": rows}, indent=1, default=str, allow_nan=False)
        write_output_file(json_path, "--json", text + "\n")  # strict JSON: a value the solver gave none of is null


def check_output_file(path: str | Path, flag: str) -> Path:
    """``path`` as a Path when a command can write a file there, checked before any work and
    leaving nothing behind; one-line UserError otherwise: an empty path, a folder or anything
    but a regular file, a path under a file, or a folder (the nearest existing one: missing
    folders are made at the write) where no file can be created (probed with a temp file, so
    read-only file systems and root alike are caught)."""
    if not str(path).strip():
        raise UserError(f"{flag} {str(path)!r}: empty path; give a file name")
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a folder; give a file path")
    if path.exists() and not path.is_file():
        raise UserError(f"{flag} {path}: not a regular file; give a file path")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{flag} {path}: is under {parent}, which is a file; give a path in a folder")
    from .orchestrate.runner import probe_writable

    probe_writable(next((p for p in path.parents if p.exists()), Path(".")), flag, path, hint="give a writable location")
    return path


def write_output_file(path: Path, flag: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file and rename: a failed write, e.g. a full
    disk, leaves no partial file); one-line UserError naming the path when it fails."""
    from .runs.atomic import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as err:
        raise UserError(f"{flag} {path}: cannot write ({err.strerror or err}); nothing was written") from None
