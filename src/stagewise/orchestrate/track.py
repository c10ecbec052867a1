"""A researcher's own training, probed into a run directory (issue 29).

:class:`Tracker` owns a standard run directory (config.yaml with ``source.kind=tracked`` and
the researcher's settings, a manifest, the metric stream -> Parquet, tables, a small resume
checkpoint after every record) and calls the lab's probe (``Lab.probe``, a
:class:`~stagewise.labs.contract.Probing`: any lab that declares one) at the steps it is given. Closing it
writes the summary, the claims and the figures exactly as a lab run's end does, so
``stagewise show``, ``stages`` and ``report`` read it unchanged. The Hugging Face Trainer's
callback is :class:`stagewise.orchestrate.trackhf.StagewiseCallback`.

Probing never changes the training: it runs without gradients (the lab's probe puts the model in eval mode), then restores
every module's train/eval flag and the torch RNG states (CPU and every CUDA device), so a
training with probes gives the same weights, bit for bit, as one without.

Example (a plain loop)::

    with Tracker("runs/mine", model, tokenizer, lab="lm", preset="counterfact-tiny", every=50,
                 settings={"lr": 1e-3, "optimizer": "adamw"}) as tracker:
        tracker.step(0, epoch=0.0)              # before training: the records' first point
        for step, batch in enumerate(batches, start=1):
            ...                                 # forward, backward, optimizer step
            tracker.step(step)                  # probes when step % every == 0

When it probes: the schedules of :mod:`stagewise.orchestrate.schedule` (``every=k``, the
budget rule, ``schedule="log"``, ``steps=[...]``), plus every step asked with ``force=True``.

Resume: a Tracker opened on a run directory of the same config (the schedule included) that
did not finish takes it up from its last record; steps at or before that record are not
probed again.

Multi-process training (DDP, ``torchrun``): make the Tracker on every rank, with the same code.
Only rank 0 (``torch.distributed``'s rank, else the ``RANK`` variable torchrun sets) makes the
run folder, probes and writes; on the other ranks the Tracker is a no-op with the same
interface that waits at a barrier while rank 0 probes. The ranks agree on every probe: the
fixed schedules are the same everywhere, the budget rule's decision is rank 0's, broadcast
(:mod:`stagewise.orchestrate.ranks`). Sharded models (FSDP, ZeRO-3) are refused up front.
"""

from __future__ import annotations

import atexit
import signal
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Mapping, Sequence

from ..config import config_hash, deep_merge, load_yaml, validate
from ..errors import UserError
from ..errors import short_repr as shown
from ..labs import Lab
from ..runs import Interrupted, RunLock, RunPaths, StopSignals, read_manifest
from .ranks import barrier, broadcast_from_main, check_not_sharded, process_rank, unwrapped
from .runner import finish, open_context, prepare, record_failure
from .schedule import BudgetRule, Schedule, schedule_of
from .trackinputs import (check_model, config_source, name_or_none, plain_mapping, probe_options, probing_lab,
                          record_epoch, record_step, run_folder)

TRACKED = "tracked"
NO_RECORD, OPEN_FAILED = -1, -2
"""What rank 0 broadcasts when it opens the run: its last record's step, or these (none yet; it
could not open the run, its own error says why)."""


def tracked_config(lab: Lab, *, preset: str | None = None, config: str | Path | Mapping[str, Any] | None = None,
                   overrides: Mapping[str, Any] | None = None, schedule: Schedule | None = None, budget: float = 0.1,
                   settings: Mapping[str, Any] | None = None) -> Any:
    """The validated config of a tracked run: the lab's defaults < ``preset`` < ``config`` (a
    YAML file or a mapping) < ``overrides`` < the source section (``kind=tracked``, the schedule:
    ``schedule``, ``every``, ``log_until``, ``probe_steps``, ``budget``; ``settings``, the
    researcher's own settings made JSON-able) and what the lab turns off in tracked runs
    (``Probing.tracked``: what only its own training has, e.g. baselines or controls)."""
    data: dict[str, Any] = dict(lab.preset_overrides(preset))
    if config is not None:
        data = deep_merge(data, load_yaml(config) if isinstance(config, (str, Path)) else dict(config))
    if overrides:
        data = deep_merge(data, dict(overrides))
    source = {"kind": TRACKED, **(schedule or Schedule()).source(), "budget": budget,
              "settings": jsonable(dict(settings or {}))}
    assert lab.probe is not None
    forced = deep_merge(dict(lab.probe.tracked), {"source": source})
    return validate(lab.Config, deep_merge(data, forced))


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: mappings and sequences kept, numbers, strings, booleans and None
    as they are, anything else (an enum, a dtype, a path) as its ``str``."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    return str(value)


class ModelState:
    """Every module's train/eval flag and the torch RNG states, saved now and put back by
    :meth:`restore` (what a probe must leave as it found)."""

    def __init__(self, model: Any):
        import torch

        self.model = model
        self.modes = [(m, m.training) for m in model.modules()]
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def restore(self) -> None:
        import torch

        for module, training in self.modes:
            module.training = training
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


class Tracker:
    """Probes a model trained elsewhere into the run directory ``out`` (module docstring).

    Args:
        out: the run directory (made now; an unfinished one of the same config is resumed).
        model: the model being trained (what the lab's probe measures: a Hugging Face causal LM
            for ``lm``, a two-layer linear network for the example lab).
        tokenizer: the tokenizer its training uses, for labs whose probe needs one (``lm``: one
            line otherwise).
        lab: the lab whose probes and claims apply: a registered lab's name (``"lm"``) or a
            :class:`~stagewise.labs.Lab` value (required; one line names the labs with probes).
        preset, config, overrides: what is probed, as for a lab run (for ``lm``: ``task``,
            ``data``, ``probes``, ``train``'s evaluation settings, ``thresholds``): a preset
            name, a YAML file or mapping, overrides.
        every: probe every k steps in :meth:`step` (0: the budget rule: at the first step given,
            then as often as ``budget`` allows, see :class:`~.schedule.BudgetRule`; always where
            asked with ``force``); with ``schedule="log"``, the period after ``log_until``.
        schedule: ``"every"`` (the default), ``"log"`` (step 0 and the powers of two up to
            ``log_until``, then every k steps: Pythia's) or ``"steps"`` (``steps``; implied by it).
        log_until: ``schedule="log"``: its last power of two (default 512, Pythia's).
        steps: an explicit schedule: the steps to probe at, increasing.
        budget: the budget rule's share of the training time probing may take, the first and
            the final probe included (0 < budget <= 1).
        settings: the researcher's own training settings, recorded in config.yaml as given.
        seed: the training's seed, recorded as the run's ``seed`` (runs of one experiment that
            differ in seed and control pair by it: ``stagewise claims LAB --runs ...``).
        **options: the lab's own probe options (``Probing.options``; anything else is one line).
            The lm lab's: ``name`` (the model's name in records), ``vocab_ids`` ((V',) the
            tokenizer ids of a compacted vocabulary's rows), ``spectra`` (per-head attention
            spectra at every record) and ``categorize`` (a researcher's own category rule,
            ``categorize(examples, predictions) -> categories``, checked once when the tracker
            is made; its records are ``category_user`` and the claims are judged by it).
        main_process: whether this process makes the run folder, probes and writes (None, the
            default: rank 0 of ``torch.distributed`` when initialised, else of the ``RANK``
            variable torchrun sets; the callback gives the Trainer's ``is_world_process_zero``).
            Elsewhere the tracker checks the same inputs, makes nothing, and in :meth:`step`
            returns rank 0's decision, waiting at a barrier while rank 0 probes
            (:mod:`~stagewise.orchestrate.ranks`; a model wrapped in ``DistributedDataParallel``
            is probed through its ``module``; a sharded one, FSDP or ZeRO-3, is one line).

    Every input is checked before the folder is made (one UserError line, nothing written).
    """

    def __init__(self, out: str | Path, model: Any, tokenizer: Any = None, *, lab: str | Lab | None = None,
                 preset: str | None = None, config: str | Path | Mapping[str, Any] | None = None,
                 overrides: Mapping[str, Any] | None = None, every: int = 0, schedule: str | None = None,
                 log_until: int | None = None, steps: Sequence[int] | None = None, budget: float = 0.1,
                 settings: Mapping[str, Any] | None = None, seed: int | None = None, main_process: bool | None = None,
                 **options: Any):
        self.lab = probing_lab(lab)
        assert self.lab.probe is not None
        self.out = run_folder(out)
        self.schedule = schedule_of(every, schedule, log_until, steps)
        preset = name_or_none(preset, "preset", "the name of one of the lab's presets")
        config = config_source(config)
        overrides, settings = plain_mapping(overrides, "overrides"), plain_mapping(settings, "settings")
        options = probe_options(self.lab, options)
        check_model(model)
        check_not_sharded(model)  # a forward pass on rank 0 alone would hang
        model = unwrapped(model)  # DDP's forward would wait for the other ranks
        if seed is not None:  # the training's seed: the run's seed key (a real run and its controls pair by it)
            overrides = deep_merge(dict(overrides or {}), {"seed": seed})
        implied = self.lab.probe.overrides(options)  # what the probe's options mean in the config (recorded)
        if implied:
            overrides = deep_merge(dict(overrides or {}), implied)
        self.config = tracked_config(self.lab, preset=preset, config=config, overrides=overrides, schedule=self.schedule,
                                     budget=budget, settings=settings)
        self.every, self.budget = self.schedule.every, self.config.source.budget
        self.lab.check(self.config)
        self.probe = self.lab.probe.make(self.config, model, tokenizer, **options)
        self.model = model
        self.main = process_rank() == 0 if main_process is None else bool(main_process)
        self.opened = False  # a tracker of another rank: open() heard rank 0's last record
        self.ctx: Any = None
        self.last_step: int | None = None
        self.records = 0
        self.closed = False
        self._signals: dict[int, Any] = {}
        self.budget_rule = BudgetRule(self.budget)  # the budget rule's clock (its ``clock`` a simulated one in tests)

    def open(self) -> "Tracker":
        """Make the run directory (or take up an unfinished one of this config); done by the
        first :meth:`step` when not called before. Returns self."""
        if self.ctx is not None or self.opened:
            return self
        if self.closed:
            raise UserError(f"{self.out}: this tracker is closed; open a new one to record more")
        if not self.main:  # another rank: no folder; rank 0's last record (a resumed run) is heard here
            last = broadcast_from_main(NO_RECORD)
            if last == OPEN_FAILED:
                raise UserError(f"{self.out}: rank 0 could not open the run (its error says why); this rank stops too")
            self.last_step, self.opened = (None if last < 0 else last), True
            return self
        try:
            self.paths, resume = self._folder(self.out)
            self._lock = RunLock(self.paths.root)
            self._lock.acquire()
            try:
                self.ctx = open_context(self.lab, self.config, self.paths, resume=resume, progress=False)
            except BaseException:
                self._lock.release()
                raise
        except BaseException:
            broadcast_from_main(OPEN_FAILED)  # the other ranks stop with one line instead of waiting
            raise
        checkpoint = self.ctx.resume_state() if resume else None
        self.last_step = int(checkpoint.meta["step"]) if checkpoint is not None else None
        if checkpoint is not None:  # the budget rule: the first step past the gap after the last record probes (timed again)
            self.budget_rule.restart()
        self.opened = True
        broadcast_from_main(NO_RECORD if self.last_step is None else self.last_step)
        atexit.register(self._at_exit)
        return self

    def _at_exit(self) -> None:
        """A process that ends with the tracker open (a training that crashed outside a ``with``
        block): the run is recorded as failed, never left 'running'."""
        if not self.closed and self.ctx is not None:
            try:
                self.fail(RuntimeError("the training process ended before the tracker was closed; what was recorded is kept"))
            except Exception:  # noqa: BLE001 (the folder may be gone at interpreter exit: nothing left to record into)
                pass

    def _folder(self, out: Path) -> tuple[RunPaths, bool]:
        """(paths, resume): a new run directory, or an unfinished one of this very config."""
        paths = RunPaths(out)
        if paths.manifest.is_file():
            manifest = read_manifest(out)
            if manifest.get("config_hash") != config_hash(self.config):
                raise UserError(f"{out}: holds a run of another config (hash {manifest.get('config_hash')}, this tracker's "
                                f"is {config_hash(self.config)}); choose another folder")
            if manifest.get("status") == "done":
                raise UserError(f"{out}: holds a finished tracked run; choose another folder")
            return paths, True
        return prepare(self.lab, self.config, out), False

    # -------------------------------------------------------------- recording
    def due(self, step: int) -> bool:
        """Whether :meth:`step` probes at ``step`` without ``force``: never at or before the last
        record; else where the schedule says (:meth:`~.schedule.Schedule.fixed`: ``every`` k,
        ``log``, ``steps``), and where it leaves the choice to the budget rule (``every=0``),
        when :meth:`~.schedule.BudgetRule.due` allows: the first step given, then never within
        :data:`~.schedule.MIN_BUDGET_GAP` steps of the last record, and while the time spent
        probing, plus the next probe and one kept for the final record, stays within ``budget``
        of the training time, the probes spread out (rule and reasons there)."""
        if self.last_step is not None and step <= self.last_step:
            return False
        fixed = self.schedule.fixed(step)
        return self.budget_rule.due(step, self.last_step) if fixed is None else fixed

    def _decided(self, step: int) -> bool:
        """:meth:`due` as every rank agrees on it: a fixed schedule's answer is the same on every
        rank; the budget rule's is rank 0's (its clock), broadcast (False on another rank when
        there is no process group to hear it from)."""
        fixed = self.schedule.fixed(step)
        if fixed is not None:
            return fixed
        return bool(broadcast_from_main(int(self.main and self.due(step))))

    def step(self, step: int, epoch: float | None = None, *, force: bool = False) -> bool:
        """Probe at training step ``step`` when due (or ``force``), recording ``epoch`` as the
        records' time coordinate (None: the step); True when it probed. A step at or before
        the last record is never probed again (a resumed training repeats them). ``step`` is a
        whole number (numpy and torch integers too) that fits int64, ``epoch`` a finite number
        >= 0; a closed tracker records nothing more (one UserError line each, nothing written).

        On a rank other than the main process it probes nothing and returns rank 0's decision:
        where rank 0 probes, it waits at a barrier until rank 0 is done (every rank must call
        ``step`` with the same steps and ``force``, as the same code on every rank does)."""
        if self.closed:
            raise UserError(f"{self.out}: this tracker is closed (its run is recorded); step({shown(step)}) would write "
                            "into it; open a new Tracker on another folder to record more")
        step = record_step(step)
        at_epoch = record_epoch(epoch, step)
        self.open()
        if self.last_step is not None and step <= self.last_step:
            return False
        if not (force or self._decided(step)):
            return False
        if not self.main:  # rank 0 probes: wait for it
            barrier()
            self.records += 1
            self.last_step = step
            return True
        import torch

        began = self.budget_rule.begin()
        state = ModelState(self.model)
        try:
            with torch.no_grad():
                self.probe.record(self.ctx, step, at_epoch)
        finally:
            state.restore()
            barrier()  # the other ranks go on (also when the probe failed: this rank then raises)
        if self.records == 0:
            self.probe.note(self.ctx)
        self.records += 1
        self.last_step = step
        self.ctx.save_checkpoint(step, {"tracker.step": torch.tensor([step])}, {"step": step})
        self.budget_rule.end(began)
        return True

    def close(self) -> dict[str, Any]:
        """Finish the run: metrics.parquet, summary.json (claims), figures, status done;
        returns the manifest ({} on a rank other than the main process, which waits at a barrier
        until rank 0 has recorded the run). Idempotent. A SIGINT or SIGTERM while it finishes (main thread)
        is recorded as the run's end (``interrupted``, resumable) and raised as
        :class:`~stagewise.runs.Interrupted`; later ones are ignored while that is recorded, so
        the manifest never stays ``running``."""
        if self.closed:
            return read_manifest(self.out) if self.main else {}
        if not self.main:  # another rank: nothing to write; wait until rank 0 has recorded the run
            if not self.opened:
                raise UserError(f"{self.out}: no record was taken (call step(...) at least once, e.g. step(0, force=True) "
                                "before training); nothing was made")
            self.closed = True
            barrier()
            return {}
        if self.ctx is None:
            raise UserError(f"{self.out}: no record was taken (call step(...) at least once, e.g. step(0, force=True) "
                            "before training); nothing was made")
        self.closed = True
        atexit.unregister(self._at_exit)
        with StopSignals():
            try:
                if self.last_step is None:
                    raise UserError(f"{self.paths.root}: no record was taken (call step(...) at least once, e.g. "
                                    "step(0, force=True) before training)")
                from ..labs.contract import RunResult

                return finish(self.lab, self.config, self.paths, self.ctx, RunResult(self.probe.extras(self.last_step)))
            except BaseException as err:
                if _status(self.paths.root) == "done":  # the stop came after the run was recorded done: it stays done
                    raise
                raised = record_failure(self.lab, self.paths, self.ctx, err, resume_hint=f"open a Tracker on {self.paths.root}")
                raise raised from None
            finally:
                self._lock.release()
                barrier()  # the other ranks' close returns once the run is recorded

    def fail(self, err: BaseException) -> BaseException:
        """Record that the training ended with ``err`` (interrupted, failed); returns what to raise.
        A SIGINT or SIGTERM while it records is ignored (the run's end is being recorded)."""
        if self.closed or self.ctx is None:
            self.closed = True
            return err
        self.closed = True
        atexit.unregister(self._at_exit)
        ignoring = StopSignals()
        ignoring.signum = getattr(err, "signum", signal.SIGTERM)  # a stop is under way: StopSignals ignores the next ones
        try:
            with ignoring:
                return record_failure(self.lab, self.paths, self.ctx, err, resume_hint=f"open a Tracker on {self.paths.root}")
        finally:
            self._lock.release()

    # -------------------------------------------------------------- context manager
    def __enter__(self) -> "Tracker":
        """SIGTERM becomes :class:`Interrupted` inside the block (main thread), recorded at exit."""
        if threading.current_thread() is threading.main_thread():
            def stop(signum: int, frame: Any) -> None:
                raise Interrupted(signum)

            self._signals = {signal.SIGTERM: signal.signal(signal.SIGTERM, stop)}
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        """Close (no error) or record ``err``; the block's SIGTERM handler is put back after."""
        stopped = False
        try:
            if err is None:
                self.close()
                return
            raised = self.fail(err)
            stopped = isinstance(err, Interrupted) and getattr(err, "signum", None) == signal.SIGTERM
        finally:
            for sig, handler in self._signals.items():
                # after a SIGTERM stop the process is ending with its Interrupted: a later SIGTERM (a scheduler's
                # second one, 100 ms on) is ignored, so it cannot kill the process half-way through its exit (issue 39).
                # SIG_IGN, not a Python handler: the interpreter resets its own handlers to the default at shutdown
                signal.signal(sig, signal.SIG_IGN if stopped and sig == signal.SIGTERM else handler)
            self._signals = {}
        if raised is not err:
            raise raised from None


def _status(root: Path) -> str | None:
    """The manifest's status in ``root`` (None when it cannot be read)."""
    try:
        return read_manifest(root).get("status")
    except Exception:  # noqa: BLE001 (a damaged manifest: not done)
        return None
