"""The `stagewise` command line (Typer + rich).

Bad input prints one line per problem (``error: ...``) and exits with code 2 before any
work starts. A run that fails exits 1 (3 when it diverged) after recording the error in
its manifest; nothing logged so far is lost.
"""

from __future__ import annotations

import importlib
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .cli_claims import claims_cmd, findings_cmd
from .cli_show import print_summary, show_cmd
from .cli_stages import stages_cmd
from .cli_lab import Stopped, WithLabCommands, plain_option_types
from .cli_lm import eval_app, lm_app
from .cli_sweep import report_cmd, reproduce_cmd, sweep_app
from .cli_text import MIN_GIST, gist, line_width
from .errors import UserError
from .runs.stops import StopSignals, signum_of

if TYPE_CHECKING:
    from typer._click.exceptions import ClickException

plain_option_types()
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=WithLabCommands,
                  help="Simulate, measure and reproduce staged training dynamics in transformers.")
app.add_typer(eval_app, name="eval")
app.add_typer(lm_app, name="lm")
app.add_typer(sweep_app, name="sweep")
app.command("report")(report_cmd)
app.command("reproduce")(reproduce_cmd)
out_console = Console()
err_console = Console(stderr=True)


def _print_version(value: bool) -> None:
    """``--version``: ``stagewise X.Y.Z`` from the installed package's metadata, exit 0."""
    if value:
        from . import __version__

        typer.echo(f"stagewise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Simulate, measure and reproduce staged training dynamics in transformers."""
    from .progress import plain_every_s

    plain_every_s()  # a bad STAGEWISE_PROGRESS_EVERY: one line before any command makes anything


def _default_out(lab: str, preset: str | None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{lab}-{preset or 'default'}-{stamp}"


@app.command("labs")
def labs_cmd(long: bool = typer.Option(False, "--long", help="every preset's whole text, in a table")) -> None:
    """List the labs and their presets: one line each (--long: the whole texts)."""
    from .labs import REGISTRY

    if not long:
        width = line_width()
        for name, lab in REGISTRY.items():
            typer.echo(f"{name}: {gist(lab.description, width - len(name) - 2)}")
            pad = min(PRESET_COLUMN, max((len(p) for p in lab.presets), default=0))
            for preset, (text, _) in lab.presets.items():
                head = f"  {preset:<{pad}}  "
                typer.echo(head + gist(text, max(width - len(head), MIN_GIST)))
        typer.echo("(--long: the whole texts; stagewise config LAB --preset P: a preset's values)")
        return
    table = Table(show_header=True, header_style="bold")
    table.add_column("lab")
    table.add_column("preset")
    table.add_column("what it runs")
    for name, lab in REGISTRY.items():
        table.add_row(escape(name), "(defaults)", escape(lab.description))  # texts are plain: "[...]" is not markup
        for preset, (text, _) in lab.presets.items():
            table.add_row("", escape(preset), escape(text))
    out_console.print(table)


PRESET_COLUMN = 28
"""Width of the preset column of ``stagewise labs`` (a longer name pushes its text right)."""


@app.command("config")
def config_cmd(lab: str = typer.Argument(..., help="lab name, see `stagewise labs`"),
               preset: Optional[str] = typer.Option(None, "--preset", "-p", help="start from this preset")) -> None:
    """Print the full default config of LAB (or of a preset) as commented YAML (derived defaults
    as the values a run uses)."""
    from .config import materialize, resolve, to_commented_yaml
    from .labs import get_lab

    value = get_lab(lab)
    config = resolve(value.Config, value.preset_overrides(preset))
    typer.echo(f"# stagewise config for lab '{lab}'" + (f", preset '{preset}'" if preset else ""))
    typer.echo(to_commented_yaml(materialize(config)))


app.command("claims")(claims_cmd)
app.command("findings")(findings_cmd)


@app.command("run")
def run_cmd(
    lab: Optional[str] = typer.Argument(None, help="lab name (omit with --resume)"),
    preset: Optional[str] = typer.Option(None, "--preset", "-p", help="named preset, see `stagewise labs`"),
    config_file: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML file of config values"),
    sets: Optional[List[str]] = typer.Option(None, "--set", "-s", help="override one value: a.b=value (repeatable)"),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="ensemble size K (seeds seed..seed+K-1, one batched pass)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (default runs/LAB-PRESET-TIME)"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="resume the run in this directory"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    allow_large: bool = typer.Option(False, "--allow-large", help="run even when the size estimate exceeds memory or disk"),
    sink: Optional[List[str]] = typer.Option(None, "--sink", help="also log to tensorboard or wandb (offline; extras "
                                             "'.\\[tensorboard]', '.\\[wandb]'; repeatable; STAGEWISE_SINKS too)"),
) -> None:
    """Run a lab: validate the config, train, write metrics, tables, summary and figures."""
    from .config import resolve
    from .labs import get_lab
    from .orchestrate import load_for_resume, start_run
    from .runs import RunPaths, read_manifest
    from .runs.sinks import resolve_sinks

    resolve_sinks(sink)  # before anything is made
    if resume is not None:
        if lab or preset or config_file or sets or seeds or out:
            raise UserError("--resume DIR takes no lab, preset, config, --set, --seeds or --out: the run's own config is used")
        value, config = load_for_resume(resume)  # the folder's checks (config.yaml, hash) first; nothing written
        if read_manifest(resume)["status"] == "done":  # nothing to resume: the run's files are left as they are
            out_console.print(f"already done: {resume} (status done; nothing to resume)", highlight=False,
                              markup=False, soft_wrap=True)
            print_summary(resume)
            return
        paths = RunPaths(resume)
    else:
        if lab is None:
            raise UserError("missing LAB: e.g. `stagewise run ntp --preset example1`; see `stagewise labs`")
        value = get_lab(lab)
        if seeds is not None and seeds < 1:
            raise UserError(f"--seeds {seeds}: must be >= 1")
        config = resolve(value.Config, value.preset_overrides(preset), config_file, sets or [],
                         {"n_seeds": seeds} if seeds is not None else None)
        paths = start_run(value, config, out or _default_out(lab, preset), allow_large, sink)
    _execute(value, config, paths, resume is not None, not quiet, sink)


def _execute(lab, config, paths, resume: bool, progress: bool, sinks=None) -> None:
    from .engine import Diverged
    from .orchestrate import execute
    from .runs import Interrupted

    try:
        execute(lab, config, paths, resume=resume, progress=progress, sinks=sinks)
    except Diverged as err:
        note = getattr(err, "stagewise_note", None)
        err_console.print("[red]run diverged[/]: " + escape(f"{err}; metrics so far kept in {paths.root}"
                                                          + (f" ({note})" if note else "")), highlight=False)
        raise typer.Exit(3) from None
    except Interrupted as err:
        err_console.print(f"interrupted ({signal_name(err.signum)}); resume with: stagewise run --resume {paths.root}",
                          highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(128 + int(err.signum)) from None
    except UserError:
        raise
    except Exception as err:
        log = getattr(err, "stagewise_error_log", None)
        note = getattr(err, "stagewise_note", None)
        where = f"traceback in {log}; " if log else ""
        err_console.print("[red]run failed[/]: " + escape(f"{type(err).__name__}: {err} ({where}"
                                                        + (f"{note}; " if note else "")
                                                        + f"resume with: stagewise run --resume {paths.root})"),
                          highlight=False)
        raise typer.Exit(1) from None
    print_summary(paths.root)


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


app.command("show")(show_cmd)
app.command("stages")(stages_cmd)


SINGLE_VALUED = {"--preset": "--preset", "-p": "--preset", "--config": "--config", "-c": "--config",
                 "--out": "--out", "-o": "--out", "--seeds": "--seeds", "--resume": "--resume",
                 "--sustain": "--sustain"}
"""Options that take one value and may be given once (alias -> name): a second one is an error,
not a silent override."""

REPEATABLE = ("--set", "-s")
"""Options that take a value and may repeat (their values are skipped when scanning)."""


def _repeated_option(args: List[str]) -> str | None:
    """A one-line message when a single-valued option (``--preset``, ``-p``, ...) is given
    more than once in ``args``, else None. Values of options are skipped, not scanned."""
    seen: dict[str, list[str]] = {}
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            break
        found: list[tuple[str, str]] = []
        if token.startswith("--"):
            name, eq, attached = token.partition("=")
            if name in SINGLE_VALUED or name in REPEATABLE:
                found.append((name, attached if eq else next(tokens, "")))
        elif token.startswith("-") and len(token) > 1:
            for pos, char in enumerate(token[1:], start=1):  # -q, -qp VALUE, -pVALUE
                name = f"-{char}"
                if name in SINGLE_VALUED or name in REPEATABLE:
                    found.append((name, token[pos + 1:] or next(tokens, "")))
                    break
        for name, value in found:
            if name in SINGLE_VALUED:
                values = seen.setdefault(SINGLE_VALUED[name], [])
                values.append(value)
                if len(values) == 2:
                    return f"{SINGLE_VALUED[name]} given more than once ({values[0]!r}, {values[1]!r}); give it once"
    return None


def _usage_line(err) -> str:
    """A click usage error (missing argument, unknown option, bad value) as one line."""
    message = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    extra = _EXTRA_ARGS.search(message)
    overrides = [a for a in extra.group(1).split() if _KEY_VALUE.match(a)] if extra else []
    if overrides:  # Hydra habit: a bare key=value
        message += f"; a config value is set with --set KEY=VALUE (--set {overrides[0]})"
    return f"{message} (see '{ctx.command_path} --help')" if ctx is not None else message


_EXTRA_ARGS = re.compile(r"unexpected extra argument(?:s|\(s\))? \((.*)\)")
_KEY_VALUE = re.compile(r"^[A-Za-z_][\w.]*=")


def _print_errors(lines) -> None:
    """Each line as ``error: LINE`` on stderr (no markup, no wrapping)."""
    for line in lines:
        err_console.print(f"error: {line}", highlight=False, markup=False, soft_wrap=True)


def _click_errors() -> tuple[type[ClickException], type[ClickException]]:
    """(ClickException, NoArgsIsHelpError) of the click typer runs on: recent typer vendors
    it as ``typer._click``, older typer uses ``click`` (whose 8.1 has no NoArgsIsHelpError)."""
    try:
        from typer._click import exceptions
    except ImportError:
        exceptions = importlib.import_module("click.exceptions")

    class _Never(exceptions.ClickException):
        """Never raised: stands in for a missing exception class."""

    return exceptions.ClickException, getattr(exceptions, "NoArgsIsHelpError", _Never)


def _notes_as_lines() -> None:
    """Show each old config name that was used (:class:`~stagewise.errors.RenamedOption`) and each
    :class:`~stagewise.errors.Note` as one ``note: ...`` line on stderr, once per message; other
    warnings keep Python's format."""
    import warnings

    from .errors import Note, RenamedOption

    shown = warnings.showwarning
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 (warnings' signature)
        if issubclass(category, (RenamedOption, Note)):
            if str(message) not in seen:
                seen.add(str(message))
                print(f"note: {message}", file=sys.stderr)
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("always", RenamedOption)
    warnings.simplefilter("always", Note)


def _stopped(signum: int) -> None:
    """``interrupted (SIGTERM)``, exit 128 + signum: a stop during a command that has no
    resume hint of its own (floors, eval blimp, a sweep's planning)."""
    err_console.print(f"interrupted ({signal_name(signum)})", highlight=False, markup=False)
    sys.exit(128 + signum)


def main() -> None:
    """Console entry point: user errors and usage errors become one line each (``error:
    ...``) and exit code 2; ``--help`` prints help and exits 0."""
    ClickException, NoArgsIsHelpError = _click_errors()  # noqa: N806 (exception classes)
    _notes_as_lines()
    try:
        repeated = _repeated_option(sys.argv[1:])
        if repeated:
            raise UserError(repeated)
        with StopSignals():  # SIGINT/SIGTERM: one Interrupted, later ones ignored while it is handled
            code = app(standalone_mode=False)
    except (KeyboardInterrupt, Stopped) as err:  # a stop no command reported (floors, planning, loading): one line
        _stopped(signum_of(err))
    except UserError as err:
        _print_errors(err.lines)
        sys.exit(2)
    except NoArgsIsHelpError as err:  # rich help is already printed; plain help is the message
        if err.format_message().strip():
            err.show()
        sys.exit(err.exit_code)
    except ClickException as err:
        _print_errors([_usage_line(err)])
        sys.exit(err.exit_code)
    except typer.Abort:
        err_console.print("aborted", highlight=False)
        sys.exit(1)
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
