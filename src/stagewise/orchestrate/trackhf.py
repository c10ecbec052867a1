"""The Hugging Face ``Trainer``'s way in: :class:`StagewiseCallback` probes the model being
trained into a run directory through a :class:`~stagewise.orchestrate.track.Tracker`
(needs transformers; the Trainer itself needs accelerate)::

    from stagewise import StagewiseCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                      callbacks=[StagewiseCallback("runs/mine", lab="lm", preset="counterfact-tiny")])
    trainer.train()        # records at the start, as often as 10 % of the training time allows, and at the end

When it probes: at the training's start (step 0 or the resumed step) and end, on the
schedule of its optimizer steps (:mod:`stagewise.orchestrate.schedule`: every ``every`` steps;
``every=0``, the default, as often as ``budget`` of the training time allows;
``schedule="log"``: step 0 and the powers of two up to ``log_until``, then every ``every``;
``steps=[...]``: those steps), and, when asked, at every epoch end (``at_epoch_end``) and
evaluation (``at_evaluate``). The records' epoch is the Trainer's ``state.epoch``. The Trainer's
arguments are recorded as the run's settings (``source.settings.trainer``), their ``seed`` as
the run's ``seed``.

The inputs are checked when the Trainer is made (``on_init_end``): a model the lab's probe
cannot take (for ``lm``: one without a tokenizer, no ``processing_class`` and none given) or a
bad probe set is one UserError line there, before any training; the run directory is made when
training starts.

Multi-process training (``torchrun``, DDP): give the callback on every rank, as the Trainer's
own code does. Only the world's main process (``state.is_world_process_zero``) makes the run
folder, probes and writes; the other ranks never touch the folder and wait at a barrier while
it probes, so no rank runs ahead (:mod:`stagewise.orchestrate.ranks`; the budget rule's
decisions are rank 0's, broadcast). FSDP and DeepSpeed ZeRO-3 are refused with one line when the
Trainer is made (a forward pass on rank 0 alone would hang): probe the saved checkpoints with
a trajectory (``stagewise LAB trajectory``) instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from transformers import TrainerCallback

from ..errors import UserError
from .ranks import check_not_sharded, check_trainer_not_sharded
from .schedule import schedule_of
from .track import Tracker
from .trackinputs import plain_mapping, run_folder


class StagewiseCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` that probes the trained model (module docstring).

    Args:
        out: the run directory.
        tokenizer: the tokenizer (default: the Trainer's ``processing_class``).
        every, schedule, log_until, steps, budget, at_epoch_end, at_evaluate: when to probe
            (module docstring; checked now, one UserError line each).
        settings: more settings to record beside the Trainer's arguments.
        **tracker: the probe sets and the rest of :class:`~stagewise.orchestrate.track.Tracker`'s
            keywords (``lab``, ``preset``, ``config``, ``overrides`` and the lab's probe options,
            e.g. the lm lab's ``spectra``, ``name``, ``vocab_ids``, ``categorize``).
    """

    def __init__(self, out: str | Path, *, tokenizer: Any = None, every: int = 0, schedule: str | None = None,
                 log_until: int | None = None, steps: Any = None, budget: float = 0.1, at_epoch_end: bool = False,
                 at_evaluate: bool = False, settings: Mapping[str, Any] | None = None, **tracker: Any):
        when = schedule_of(every, schedule, log_until, steps)  # a bad schedule is one line here, before the Trainer
        self.out, self.tokenizer, self.every, self.budget = run_folder(out), tokenizer, when.every, budget
        self.when = when
        self.at_epoch_end, self.at_evaluate = at_epoch_end, at_evaluate
        self.settings = plain_mapping(settings, "settings") or {}
        self.options = tracker
        self.tracker: Tracker | None = None

    def on_init_end(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                    **kwargs: Any) -> None:
        tokenizer = self.tokenizer if self.tokenizer is not None else processing_class  # the lab's probe checks it
        if model is None:
            raise UserError("StagewiseCallback: the Trainer has no model to probe")
        check_trainer_not_sharded(args)  # FSDP / ZeRO-3 asked for: refused before any training
        trainer = {k: v for k, v in args.to_dict().items() if k != "seed"}  # the seed is the run's own (config.seed)
        settings = {"trainer": trainer, **self.settings}
        options = {"seed": int(args.seed), "main_process": bool(state.is_world_process_zero), **self.options}
        self.tracker = Tracker(self.out, model, tokenizer, every=self.every, budget=self.budget, settings=settings,
                               schedule=self.when.kind, log_until=self.when.log_until or None,
                               steps=list(self.when.steps) or None, **options)

    def _tracker(self) -> Tracker:
        if self.tracker is None:
            raise UserError("StagewiseCallback: the Trainer did not initialise the callback (pass it in Trainer(callbacks=[...]))")
        return self.tracker

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if kwargs.get("model") is not None:  # the model as the Trainer wrapped it (FSDP replaces it)
            check_not_sharded(kwargs["model"])
        self._tracker().step(int(state.global_step), float(state.epoch or 0.0), force=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._tracker().step(int(state.global_step), float(state.epoch or 0.0))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.at_epoch_end:
            self._tracker().step(int(state.global_step), float(state.epoch or 0.0), force=True)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.at_evaluate:
            self._tracker().step(int(state.global_step), float(state.epoch or 0.0), force=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        tracker = self._tracker()
        try:
            tracker.step(int(state.global_step), float(state.epoch or 0.0), force=True)
        except BaseException as err:
            raise tracker.fail(err) from None
        tracker.close()

    def __enter__(self) -> "StagewiseCallback":
        """``with callback: trainer.train()``: a training that raises is recorded (interrupted, failed)."""
        return self

    def __exit__(self, kind: Any, err: BaseException | None, tb: Any) -> None:
        if err is not None and self.tracker is not None:
            raised = self.tracker.fail(err)
            if raised is not err:
                raise raised from None
