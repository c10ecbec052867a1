"""The conformance checks of :func:`stagewise.testing.check_lab`, each a plain function of
a :class:`Session` (the lab, a work folder, the smoke run made at first need).

A check passes by returning, fails by raising AssertionError (or any error: its first line
is the message), and is skipped by raising :class:`Skip` or
:class:`~stagewise.errors.NotAvailable` (the message is the reason).
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from ..config import config_hash, deep_merge
from ..errors import NotAvailable
from ..labs import Lab, RunSpec, spec_config, spec_hash
from ..orchestrate import execute_spec
from ..report.claims import Summary
from ..runs import RunDirContext

MIN_FIGURE_BYTES = 1000  # a PNG smaller than this holds no plot
UNKNOWN_KEY = "no_such_key"  # the key the unknown-key check sets


class Skip(Exception):
    """A check that cannot run here (its reason is the message)."""


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def first_line(err: BaseException) -> str:
    """``TypeName: first line of the message`` of an error."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


SmokeSource = Callable[[RunSpec, Path], Path]
"""(smoke spec, folder to put it in) -> the folder of that spec's finished run."""


def run_smoke(spec: RunSpec, folder: Path) -> Path:
    """The default :data:`SmokeSource`: run ``spec`` into ``folder``."""
    execute_spec(spec, folder, raise_on_failure=True)
    return folder


@dataclass
class Session:
    """What the checks of one :func:`check_lab` call (or one :class:`LabCheck`) share: the
    lab, a work folder and the smoke run, made at first need by ``smoke_source`` (default:
    run it into ``folder/smoke``; a test suite passes a cache of finished runs that hands out
    a copy). The smoke run's error is kept so dependents are skipped. The checks may write
    into the smoke run's folder: a source must hand out a folder of the session's own."""

    lab: Lab
    folder: Path
    smoke_source: SmokeSource = field(default=run_smoke, repr=False)
    _smoke: tuple[Path, dict[str, Any]] | BaseException | None = field(default=None, repr=False)

    def smoke_spec(self, name: str = "smoke") -> RunSpec:
        return RunSpec(lab=self.lab.name, overrides=dict(self.lab.smoke), name=name)

    def smoke_run(self) -> tuple[Path, dict[str, Any]]:
        """(run dir, manifest) of the lab's smoke run; raises what the run raised."""
        if self._smoke is None:
            try:
                root = Path(self.smoke_source(self.smoke_spec(), self.folder / "smoke"))
                self._smoke = root, json.loads((root / "manifest.json").read_text(encoding="utf-8"))
            except Exception as err:
                self._smoke = err
        if isinstance(self._smoke, BaseException):
            raise self._smoke
        return self._smoke

    def finished_smoke_run(self) -> tuple[Path, dict[str, Any]]:
        """The smoke run for a check that reads it: skipped when the run did not finish."""
        try:
            return self.smoke_run()
        except NotAvailable as err:
            raise Skip(f"needs the smoke run, which is not available: {err}") from None
        except Exception as err:
            raise Skip(f"needs the smoke run, which failed ({first_line(err)})") from None


# ------------------------------------------------------------------------------- checks
def _cli_commands() -> set[str]:
    """The names of the `stagewise` app's own commands and command groups."""
    from ..cli import app

    commands = {info.name for info in app.registered_commands if info.name}
    return commands | {info.name for info in app.registered_groups if info.name}


def check_lab_value(session: Session) -> None:
    """The Lab value: name, description, smoke overrides, a reproduction set of this lab
    with unique non-empty names, ``--quick`` a subset of the full set, every paper its claims
    cite declared in ``Lab.sources``, its commands named apart from the CLI's own."""
    lab = session.lab
    _require(isinstance(lab, Lab), f"not a Lab value: {type(lab).__name__}")
    _require(lab.name and lab.description, "a lab needs a name and a description")
    _require(lab.smoke, "a lab must give smoke overrides for a seconds-long run (Lab.smoke)")
    _require(lab.reproduce.full, "the reproduction set is empty (Lab.reproduce.full)")
    other = sorted({s.lab for s in (*lab.reproduce.full, *lab.reproduce.quick)} - {lab.name})
    _require(not other, f"reproduce entries name other labs: {other}")
    names = [spec.name for spec in lab.reproduce.full]
    _require(all(names) and len(set(names)) == len(names), f"reproduce names must be unique and non-empty: {names}")
    extra = sorted({s.name for s in lab.reproduce.quick} - set(names))
    _require(not extra, f"--quick entries not in the full set: {extra}")
    papers = sorted({str(c.source.paper) for c in lab.claims if c.source.kind == "paper"} - set(lab.sources))
    _require(not papers, f"claims cite papers not declared in Lab.sources: {papers}")
    taken = sorted(set(lab.commands) & _cli_commands())
    _require(not taken, f"Lab.commands named like commands the CLI has: {taken}")


def check_entry(session: Session, spec: RunSpec) -> None:
    """The entry resolves, passes ``lab.check`` (NotAvailable: skipped) and has a size estimate."""
    config = spec_config(spec)
    session.lab.check(config)
    memory = session.lab.estimate(config).memory_bytes
    _require(memory > 0, f"lab.estimate gives {memory} bytes of memory; it must be positive")


def check_spec_serializes(session: Session) -> None:
    """The smoke spec survives JSON (and pickle, which the Ray and SLURM executors use) with
    its hash, and the hash is the resolved config's hash."""
    spec = session.smoke_spec()
    again = RunSpec.from_json(spec.to_json())
    _require(again == spec and spec_hash(again) == spec_hash(spec), "the spec changes through JSON")
    _require(spec_hash(pickle.loads(pickle.dumps(spec))) == spec_hash(spec), "the spec's hash changes through pickle")
    _require(spec_hash(spec) == config_hash(spec_config(spec)), "the spec's hash is not its config's hash")


def check_smoke_overrides_valid(session: Session) -> None:
    """``Lab.smoke`` validates as a config on its own (no preset)."""
    session.lab.Config.model_validate(deep_merge({}, dict(session.lab.smoke)))


def _nested_section(lab: Lab) -> str | None:
    """The first config field that is itself a model (``train``, ``data``, ...), or None."""
    for name, info in lab.Config.model_fields.items():
        if isinstance(info.annotation, type) and hasattr(info.annotation, "model_fields"):
            return name
    return None


def _cli(*args: str) -> tuple[int, str]:
    """(exit code, stderr) of ``stagewise ARGS...`` run in this process."""
    from ..cli import main

    argv, err = sys.argv, io.StringIO()
    sys.argv = ["stagewise", *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return code, err.getvalue()


def check_unknown_key(session: Session) -> None:
    """``stagewise run LAB --set no_such_key=1`` (and the same key in a config section)
    exits 2 with one line naming the key, and makes no run directory."""
    out = session.folder / "unknown-key"
    section = _nested_section(session.lab)
    for key in [UNKNOWN_KEY, *([f"{section}.{UNKNOWN_KEY}"] if section else [])]:
        code, stderr = _cli("run", session.lab.name, "--set", f"{key}=1", "--out", str(out))
        lines = stderr.strip().splitlines()
        _require(code == 2, f"--set {key}=1: exit code {code}, expected 2 ({stderr.strip()[:200]!r})")
        _require(len(lines) == 1 and UNKNOWN_KEY in lines[0], f"--set {key}=1: expected one line naming the key, got {lines}")
        _require(not out.exists(), f"--set {key}=1: the run directory was made")


def check_smoke_run(session: Session) -> None:
    """The smoke run finishes (status done) with a valid summary of this lab and seeds,
    ``metrics.parquet`` with the five columns and every seed, and every table as recorded."""
    import pandas as pd

    root, manifest = session.smoke_run()
    lab = session.lab
    _require(manifest["status"] == "done" and manifest["lab"] == lab.name, f"manifest: status {manifest['status']}")
    summary = Summary.model_validate(json.loads((root / "summary.json").read_text()))
    _require(summary.lab == lab.name and summary.seeds == manifest["seeds"], "summary.json: wrong lab or seeds")
    frame = pd.read_parquet(root / "metrics.parquet")
    _require(set(frame.columns) == {"step", "seed", "variant", "metric", "value"}, f"metrics columns {list(frame.columns)}")
    _require(set(frame["seed"]) == set(manifest["seeds"]), "metrics.parquet does not hold every seed")
    for name, entry in manifest.get("tables", {}).items():
        path = root / entry["path"]
        _require(path.exists() and len(pd.read_parquet(path)) == entry["rows"], f"table {name} differs from the manifest")


def check_figures(session: Session) -> None:
    """The smoke run made figures: each PNG non-trivial and with its PDF."""
    root, _ = session.finished_smoke_run()
    pngs = sorted((root / "figures").glob("*.png"))
    _require(pngs, "no figures/*.png")
    for png in pngs:
        _require(png.stat().st_size > MIN_FIGURE_BYTES, f"{png.name}: under {MIN_FIGURE_BYTES} bytes")
        _require(png.with_suffix(".pdf").exists(), f"{png.name}: no PDF")


def _summary(session: Session) -> Summary:
    root, _ = session.finished_smoke_run()
    return Summary.model_validate(json.loads((root / "summary.json").read_text()))


def check_claims_declared(session: Session) -> None:
    """The smoke summary tests claims, each with evidence (or a reason), every claim
    instantiates one of the lab's declared ``Lab.claims`` (its ``spec_id``), and the summary
    names (``sources``) every paper its claims cite."""
    summary = _summary(session)
    declared = {spec.id for spec in session.lab.claims}
    _require(summary.claims, "the smoke summary holds no claims")
    _require(all(c.evidence or c.reason for c in summary.claims), "claims without evidence")
    undeclared = [c.id for c in summary.claims if c.spec_id is None or c.spec_id not in declared]
    _require(not undeclared, f"claims not declared in Lab.claims: {', '.join(undeclared)}"
             + ("" if declared else " (the lab declares none)"))
    unnamed = sorted({str(c.source.paper) for c in summary.claims if c.source and c.source.kind == "paper"} - set(summary.sources))
    _require(not unnamed, f"summary.sources does not name the papers {unnamed} its claims cite")


def check_key_metrics(session: Session) -> None:
    """Every ``Lab.key_metrics`` name is in ``summary.per_seed`` for every seed (or, without
    per-seed values, in ``summary.final``): what sweeps plot by default."""
    summary = _summary(session)
    for name in session.lab.key_metrics:
        if summary.per_seed:
            missing = [seed for seed, values in summary.per_seed.items() if name not in values]
            _require(not missing, f"key metric {name} missing from summary.per_seed of seeds {missing}")
        else:
            _require(name in summary.final, f"key metric {name} in neither summary.per_seed nor summary.final")


def check_run_again_skipped(session: Session) -> None:
    """Running the finished smoke spec into its directory again does nothing."""
    root, _ = session.finished_smoke_run()
    before = (root / "metrics.parquet").stat().st_mtime_ns
    again = execute_spec(session.smoke_spec(), root)
    _require(again["status"] == "done", f"run again: status {again['status']}")
    _require((root / "metrics.parquet").stat().st_mtime_ns == before, "run again rewrote metrics.parquet")


@contextlib.contextmanager
def kill_after(records: int | None = None, *, step: int | None = None) -> Iterator[dict[str, bool]]:
    """Inside the block, ``RunDirContext.log`` raises KeyboardInterrupt (a simulated kill)
    right after its ``records``-th call, or right after it logs step ``step``; yields
    ``{"fired": bool}``. Exactly one of the two is given."""
    if (records is None) == (step is None):
        raise ValueError("kill_after: give records or step")
    original, count, state = RunDirContext.log, [0], {"fired": False}

    def crashing(self: Any, at: int, values: Any, **kw: Any) -> None:
        original(self, at, values, **kw)
        count[0] += 1
        if count[0] == records or at == step:
            state["fired"] = True
            raise KeyboardInterrupt("simulated kill")

    with mock.patch.object(RunDirContext, "log", crashing):  # restores the original method on exit
        yield state


def check_resume_equals_uninterrupted(session: Session) -> None:
    """A run killed halfway (after half its metric records) and resumed ends with the
    smoke run's metrics, tables and claims, exactly."""
    import pandas as pd

    root, _ = session.finished_smoke_run()
    crash = session.folder / "crash"
    with open(root / "metrics.jsonl", encoding="utf-8") as lines:
        records = sum(1 for _ in lines)
    with kill_after(records // 2 + 1) as kill:
        try:
            execute_spec(session.smoke_spec(), crash)
        except KeyboardInterrupt:
            if not kill["fired"]:
                raise
    _require(kill["fired"], "the simulated kill never fired: the second run logged fewer records")
    status = json.loads((crash / "manifest.json").read_text())["status"]
    _require(status == "interrupted", f"killed run: status {status}, expected interrupted")
    resumed = execute_spec(session.smoke_spec(), crash)
    _require(resumed["status"] == "done", f"resumed run: status {resumed['status']}")
    try:
        pd.testing.assert_frame_equal(pd.read_parquet(crash / "metrics.parquet"), pd.read_parquet(root / "metrics.parquet"),
                                      check_exact=True)
        for table in sorted((root / "tables").glob("*.parquet")):
            pd.testing.assert_frame_equal(pd.read_parquet(crash / "tables" / table.name), pd.read_parquet(table),
                                          check_exact=True, obj=f"table {table.stem}")
    except AssertionError as err:
        raise AssertionError(f"resumed run differs from the uninterrupted one: {' '.join(str(err).split())[:300]}") from None
    claims = [json.loads((folder / "summary.json").read_text())["claims"] for folder in (crash, root)]
    _require(claims[0] == claims[1], "resumed run's claims differ from the uninterrupted run's")


CHECKS: dict[str, Callable[..., None]] = {
    "lab_value": check_lab_value,
    "preset": check_entry,
    "reproduce": check_entry,
    "spec_serializes": check_spec_serializes,
    "smoke_overrides_valid": check_smoke_overrides_valid,
    "unknown_key": check_unknown_key,
    "smoke_run": check_smoke_run,
    "figures": check_figures,
    "claims_declared": check_claims_declared,
    "key_metrics": check_key_metrics,
    "run_again_skipped": check_run_again_skipped,
    "resume_equals_uninterrupted": check_resume_equals_uninterrupted,
}
"""Check name -> function of the session, in the order :func:`check_lab` runs them
(``preset`` and ``reproduce`` once per entry: a function of the session and the entry's spec)."""
