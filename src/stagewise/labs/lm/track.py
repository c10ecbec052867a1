"""Probes: the lm lab's records of a model it did not train (issue 29).

A :class:`Probe` is the lab's evaluation (``train.record_epoch``) bound to someone else's
model: the probe sets are the config's ``task``/``data`` sections (read, tokenized and
checked once, when the probe is made), and :meth:`Probe.record` writes, at any step, exactly
the records a lab run writes after an epoch: the ``predictions`` table (both type rules),
``train.*`` counts and per-task losses, the held-out records and BLiMP minimal pairs with
``task.heldout``, the per-head spectra with ``source.spectra``. So ``stagewise show``,
``stages``, ``report`` and the claims read a tracked run or a trajectory as they read a lab
run. In these runs ``train.*`` names the probe set, not necessarily the training data.

Three sources use it (``source.kind``):

* ``tracked``: a researcher's own training, through :mod:`stagewise.orchestrate.track`
  (``Tracker``, the Trainer callback), which owns the run directory;
* ``checkpoint``: one saved model (``model.name``) recorded at ``source.step`` (a lab run:
  what each task of a dispatched trajectory runs);
* ``trajectory``: the saved models of ``source.checkpoints`` in order, one at a time, with a
  resume checkpoint after each; a checkpoint whose ``checkpoint`` run already finished under
  ``parts/`` (``stagewise lm trajectory --executor``) is folded in instead of evaluated.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ...config import MAX_RECORD_STEP, whole_number
from ...errors import UserError, short_repr
from ...lmkit.models import LoadedModel
from ...lmkit.scoring import max_positions
from ...lmkit.weightfiles import check_weight_folder
from ..contract import RunContext, RunResult, part_key
from .config import Config
from .prepare import Prepared, prepare_for, read_probe_data

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
"""A folder holding one of these (beside config.json) is a saved model (``save_pretrained``)."""
SHAPE_KEYS = ("model_type", "architectures", "vocab_size", "n_layer", "n_embd", "n_head", "n_inner", "hidden_size",
              "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size", "head_dim")
"""config.json entries that must agree along a trajectory (one architecture, one shape)."""
# ------------------------------------------------------------------ the probe
class Probe:
    """The lm lab's records of ``loaded.model`` at any step (module docstring).

    Made once (the probe sets read, tokenized, encoded and checked: a bad set is one
    UserError line before any record), then :meth:`record` per step. The caller owns the
    model's mode and RNG (:class:`stagewise.orchestrate.track.Tracker` restores both);
    ``record`` evaluates under ``torch.inference_mode`` in eval mode.

    Example::

        probe = Probe(config, LoadedModel(model, tokenizer, "my-run"))
        probe.note(ctx)                        # the dropped / kept examples into the manifest's notes
        probe.record(ctx, step=100, epoch=0.5)
    """

    def __init__(self, config: Config, loaded: LoadedModel, *, quiet: bool = True, data: Any = None,
                 categorize: Callable[[Sequence[Any], Sequence[str]], Sequence[str]] | None = None,
                 categorizers: Mapping[str, Callable[..., Sequence[str]]] | None = None, sets: list[Any] | None = None):
        if loaded.tokenizer is None:
            raise UserError("the model has no tokenizer: give the probe the tokenizer its training used "
                            "(tokenizer=..., or the Trainer's processing_class)")
        self.config, self.loaded = config, loaded
        device = next(loaded.model.parameters()).device
        # the researcher's own sets, read and checked first (``sets``: read before, for the same tokenizer and context)
        self.sets = sets if sets is not None else probe_sets(config, loaded.tokenizer, vocab_ids=loaded.vocab_ids,
                                                               context=max_positions(loaded.model),
                                                               categorizers=categorizers or {})
        self.prep: Prepared | None = None
        self._items: list[Any] = []
        if config.task.name != "none":
            tokenized, held = data if data is not None else read_probe_data(config, loaded.tokenizer, quiet=quiet)
            self.prep = prepare_for(config, tokenized, held, loaded, device)
            self._items = list(tokenized.items)
        self._heldout: Any = None
        self._spectra: Any = None
        self.categorize = categorize
        self._strings: list[str] = []
        if categorize is not None:
            if config.task.framing != "answer" or self.prep is None:
                raise UserError("categorize: a category rule judges the lab task's answers; this run has none (task.framing=lm "
                                "or task.name=none); a probe set's own categories: Tracker(categorizers={SET: fn})")
            from .categories import row_strings

            self._strings = row_strings(loaded.tokenizer, loaded.vocab_ids, loaded.vocab_size)
            self.user_codes([e.answer for e in self._items])  # the function's shape checked once, before any record

    def note(self, ctx: RunContext) -> None:
        """The facts a lab run notes (dropped multi-token answers, replaced answers, the type
        rule's exclusions, the examples per task, the held-out split and priors), and the size
        of each of the researcher's own probe sets."""
        from .twotask import note_heldout

        if self.sets:
            ctx.note("probe_sets", {s.name: {"kind": s.kind, "rows": len(s.pairs) if s.pairs is not None else len(s.ids)}
                                    for s in self.sets})
        if self.prep is None:
            return
        self.prep.note(ctx)
        if self.prep.heldout is not None:
            note_heldout(ctx, self.prep.heldout)

    def record(self, ctx: RunContext, step: int, epoch: float) -> None:
        """The records of one evaluation at ``step`` (``epoch``: the records' time coordinate):
        the lab task's (unless ``task.name=none``), then every probe set's (``probe.SET.*``)."""
        from ...lmkit.probesets import measure
        from .train import log_values, record_epoch
        from .twotask import HeldoutEval

        prep, cfg = self.prep, self.config
        model = self.loaded.model
        with torch.inference_mode():
            if prep is not None:
                if prep.heldout is not None and self._heldout is None:
                    self._heldout = HeldoutEval(cfg, prep.heldout, prep.device, prep.loaded.vocab_ids)
                record_epoch(cfg, model, prep.encoded, ctx, prep.device, epoch, step, prep.space, prep.loaded.vocab_ids,
                             None, heldout=self._heldout,
                             user_rule=self._user_rule if self.categorize is not None else None)
            values = {f"probe.{k}": torch.tensor(v, dtype=torch.float64) for k, v in measure(model, self.sets).items()}
            if prep is None or values:
                log_values(ctx, step, epoch, values)
            if cfg.source.spectra:
                self._record_spectra(ctx, step, epoch)

    def _record_spectra(self, ctx: RunContext, step: int, epoch: float) -> None:
        from ...lmkit.spectra import spectra_hook

        if self._spectra is None:
            self._spectra = spectra_hook(self.loaded.model)
        metrics, table = self._spectra(self.loaded.model)
        ctx.log(step, {k: v.reshape(1).double() for k, v in metrics.items()})
        if table is not None:
            ctx.log_table("spectra", table.assign(epoch=epoch, step=step), part=step)

    def user_codes(self, predictions: Sequence[str]) -> torch.Tensor:
        """(N,) category codes of the researcher's ``categorize(examples, predictions)``: one of
        "semantic-correct", "type-correct", "type-wrong", "excluded" per example (one UserError
        line naming the first bad value otherwise)."""
        from .categories import OPEN_CATEGORIES

        assert self.categorize is not None
        index = {name: i for i, name in enumerate(OPEN_CATEGORIES)}
        returned = self.categorize(self._items, list(predictions))
        if returned is None or isinstance(returned, (str, bytes, Mapping)) or not hasattr(returned, "__iter__"):
            raise UserError(f"categorize returned {short_repr(returned)}; give a list of categories, one per example")
        got = list(returned)
        if len(got) != len(self._items):
            raise UserError(f"categorize returned {len(got)} categories for {len(self._items)} examples; one per example")
        bad = next((i for i, c in enumerate(got) if c not in index), None)
        if bad is not None:
            raise UserError(f"categorize returned {got[bad]!r} for example {self._items[bad].id}; allowed: "
                            f"{', '.join(OPEN_CATEGORIES)}")
        return torch.tensor([index[c] for c in got], dtype=torch.long)

    def _user_rule(self, ev: Any) -> torch.Tensor:
        """The user codes of an evaluation: its top-1 tokens as text, through ``categorize``."""
        return self.user_codes([self._strings[r] for r in ev.top_rows[:, 0].tolist()])

    def extras(self, steps: int | None = None) -> dict[str, Any]:
        """The run's facts for its summary (a lab run's RunResult extras)."""
        if self.prep is None:
            return {"model": self.loaded.name, "examples": {}, "dropped": {}, "steps": steps,
                    "vocab_rows": self.loaded.vocab_size, "probe_sets": [s.name for s in self.sets]}
        return {**self.prep.extras(steps), "probe_sets": [s.name for s in self.sets]}


def probe_sets(config: Config, tokenizer: Any, *, vocab_ids: torch.Tensor | None = None, context: int | None = None,
               categorizers: Mapping[str, Callable[..., Sequence[str]]] | None = None) -> list[Any]:
    """The config's own probe sets (``probes``) read and tokenized for ``tokenizer``
    (:func:`stagewise.lmkit.probesets.read_probe_set`; ``vocab_ids`` a compact model's rows,
    ``context`` its longest input): a pairs set without a path reads ``data.root``'s ``blimp/``;
    a questions set's ``kind`` words are the lab's type lexicons; ``categorizers`` maps a
    questions set to the researcher's category function (its declared ``categories``). One
    UserError line for the first bad set, before any record."""
    from ...lmkit.probesets import read_probe_set

    categorizers = {} if categorizers is None else categorizers
    if not isinstance(categorizers, Mapping):
        raise UserError(f"categorizers={short_repr(categorizers)}: a mapping of a questions set's name to its function")
    known = {p.name: p for p in config.probes}
    stray = next((n for n in categorizers if n not in known or known[n].kind != "questions"), None)
    if stray is not None:
        raise UserError(f"categorizers: {stray!r} is not a questions set of the config's probes "
                        f"({', '.join(p.name for p in config.probes if p.kind == 'questions') or 'none'})")
    out = []
    for p in config.probes:
        path = p.path
        if path is None:  # pairs: the shared data's BLiMP folder
            root = config.data.resolved_root()
            if root is None:
                raise UserError(f"probes[{p.name}]: give its path (a BLiMP or Zorro folder), or data.root holding blimp/")
            path = root / "blimp"
        fn = categorizers.get(p.name)
        if fn is not None and not p.categories:
            raise UserError(f"categorizers[{p.name!r}]: declare the names it returns in probes[{p.name}].categories")
        out.append(read_probe_set(p.name, p.kind, path, tokenizer, limit=p.limit, paradigms=p.paradigms,
                                  window=p.window, buckets=p.buckets, frequency=p.frequency, vocab_ids=vocab_ids,
                                  kind_words=TypeLexicons(), context=context, categorize=fn, categories=p.categories,
                                  classes=p.classes))
    return out


class TypeLexicons(Mapping[str, frozenset[str]]):
    """A questions row's ``kind`` -> the lab's type lexicon of that name (:data:`.categories.KIND_ORDER`:
    country, city, language, occupation, ...), read when first asked; other kinds have none."""

    def __getitem__(self, kind: str) -> frozenset[str]:
        from .categories import KIND_ORDER, lexicon

        if kind not in KIND_ORDER:
            raise KeyError(kind)
        return lexicon(kind)

    def __iter__(self) -> Any:
        from .categories import KIND_ORDER

        return iter(KIND_ORDER)

    def __len__(self) -> int:
        from .categories import KIND_ORDER

        return len(KIND_ORDER)


def probe_overrides(options: Mapping[str, Any]) -> dict[str, Any]:
    """The config overrides the probe's options imply: ``spectra`` -> ``source.spectra``; a
    ``categorize`` function -> its name in ``source.categorize`` and the claims judged by it
    (``thresholds.type_rule=user``). A ``categorize`` that is not callable is one line."""
    out: dict[str, Any] = {}
    if options.get("spectra"):
        out["source"] = {"spectra": True}
    categorize = options.get("categorize")
    if categorize is not None:
        if not callable(categorize):
            raise UserError(f"categorize={short_repr(categorize)}: give a function (examples, predictions) -> categories")
        label = f"{getattr(categorize, '__module__', '?')}.{getattr(categorize, '__qualname__', type(categorize).__name__)}"
        out.setdefault("source", {})["categorize"] = label
        out["thresholds"] = {"type_rule": "user"}
    return out


def probe(config: Config, model: Any, tokenizer: Any, *, name: str | None = None,
          vocab_ids: torch.Tensor | None = None,
          categorize: Callable[[Sequence[Any], Sequence[str]], Sequence[str]] | None = None,
          spectra: bool = False, categorizers: Mapping[str, Callable[..., Sequence[str]]] | None = None) -> Probe:
    """The lab's ``Lab.probe``: a :class:`Probe` of ``model`` (a Hugging Face causal LM) with
    ``tokenizer`` (left as it is; the probe pads with EOS on a copy when it has no pad token); ``vocab_ids`` (V',) when the model's
    rows are a subset of the tokenizer's ids (a compact vocabulary, e.g. the lab's own tiny runs);
    ``categorize(examples, predictions) -> categories`` a researcher's own category rule
    (examples: :class:`~.tasks.Example` values with ``prompt``, ``answer``, ``group``, ``task``,
    ``id``; predictions: each one's top-1 token as text), recorded as ``category_user``;
    ``spectra`` is read from the config (``source.spectra``, set by :func:`probe_overrides`).
    The model, the tokenizer and ``vocab_ids`` are checked first (:func:`check_inputs`)."""
    if name is not None and not isinstance(name, str):
        raise UserError(f"name={short_repr(name)}: the model's name in the records, a string (got {type(name).__name__})")
    vocab_ids = check_inputs(model, tokenizer, vocab_ids)
    if tokenizer is None:
        raise UserError("tokenizer: the model has no tokenizer; give the one its training uses (Tracker(..., tokenizer) "
                        "or the Trainer's processing_class)")
    if tokenizer is not None and getattr(tokenizer, "pad_token_id", None) is None:
        # the probe pads with EOS on its own copy: the researcher's tokenizer is never changed (a collator
        # reading pad_token == eos_token would mask every EOS label, issue 39)
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.pad_token = tokenizer.eos_token
    label = name or str(getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)
    return Probe(config, LoadedModel(model, tokenizer, label, vocab_ids), categorize=categorize, categorizers=categorizers)


def check_inputs(model: Any, tokenizer: Any, vocab_ids: Any) -> torch.Tensor | None:
    """``vocab_ids`` as a (V',) int64 tensor (or None) once the inputs fit together, else one
    UserError line: ``tokenizer`` a Hugging Face tokenizer (callable, with ``eos_token`` and a
    length); ``model`` a causal LM with input embeddings; ``vocab_ids`` (a tensor, array or
    list of token ids) one distinct id of the tokenizer per embedding row; without them, at
    least as many embedding rows as the tokenizer has tokens (a token past the last row has no
    embedding: the probe would fail on its first record)."""
    if tokenizer is not None and not (callable(tokenizer) and hasattr(tokenizer, "eos_token") and hasattr(tokenizer, "__len__")):
        raise UserError(f"tokenizer={short_repr(tokenizer)}: not a Hugging Face tokenizer (got {type(tokenizer).__name__}); "
                        "give the one the training uses (e.g. AutoTokenizer.from_pretrained(...))")
    try:
        weight = getattr(model.get_input_embeddings(), "weight", None)
    except (AttributeError, NotImplementedError):  # not a Hugging Face model, or one without input embeddings
        weight = None
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise UserError(f"model: {type(model).__name__} is not a Hugging Face causal LM (no input embeddings: "
                        "get_input_embeddings()); the lm lab probes language models")
    rows = int(weight.shape[0])
    vocab = len(tokenizer) if tokenizer is not None else None
    if vocab_ids is None:
        if vocab is not None and rows < vocab:
            raise UserError(f"model: {rows} embedding rows for a tokenizer of {vocab} tokens; give the model its "
                            "tokenizer's vocabulary (model.resize_token_embeddings(len(tokenizer))) or, for a compacted "
                            "vocabulary, vocab_ids=(the tokenizer id of each row)")
        return None
    ids = None
    if isinstance(vocab_ids, (torch.Tensor, np.ndarray, list, tuple)):
        try:
            ids = torch.as_tensor(vocab_ids)
        except (TypeError, ValueError, RuntimeError):
            ids = None
    if ids is None or ids.dim() != 1 or ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise UserError(f"vocab_ids={short_repr(vocab_ids)}: the tokenizer id of each of the model's rows, a 1-D list or "
                        "tensor of whole numbers")
    ids = ids.to(torch.long)
    if len(ids) != rows:
        raise UserError(f"vocab_ids: {len(ids)} ids for {rows} embedding rows; one tokenizer id per row")
    if rows and (int(ids.min()) < 0 or (vocab is not None and int(ids.max()) >= vocab)):
        raise UserError(f"vocab_ids: ids from {int(ids.min())} to {int(ids.max())}; the tokenizer's ids are 0 to "
                        f"{(vocab or 0) - 1}")
    if len(torch.unique(ids)) != rows:
        raise UserError("vocab_ids: an id repeats; each row stands for a distinct tokenizer id")
    return ids


# ------------------------------------------------------------------ saved models
@dataclass(frozen=True)
class SavedModel:
    """A ``save_pretrained`` folder of a trajectory: its config.json and trainer state."""

    folder: Path
    config: dict[str, Any]
    step: int | None  # trainer_state.json's global_step
    epoch: float | None  # trainer_state.json's epoch

    def shape(self) -> dict[str, Any]:
        return {k: self.config.get(k) for k in SHAPE_KEYS if k in self.config}


def read_saved(name: str, where: str) -> SavedModel:
    """The saved model at ``name``; one UserError line (``where`` names the entry) when the
    folder is missing or holds no model (config.json and a weights file)."""
    folder = Path(name).expanduser()
    if not folder.exists():
        raise UserError(f"{where}={name}: not found (a trajectory takes model folders written by save_pretrained)")
    if not folder.is_dir():
        raise UserError(f"{where}={name}: not a folder (a trajectory takes model folders written by save_pretrained)")
    config = _json(folder / "config.json", where, name)
    if config is None or not any((folder / f).is_file() for f in WEIGHT_FILES):
        missing = "config.json" if config is None else f"weights ({', '.join(WEIGHT_FILES[::2])})"
        raise UserError(f"{where}={name}: not a model folder (no {missing}); save it with model.save_pretrained(folder)")
    check_weight_folder(f"{where}={name}", folder)  # pickle-only weights: refused here, before any folder is made
    state = _json(folder / "trainer_state.json", where, name) or {}
    step, epoch = state.get("global_step"), state.get("epoch")
    if step is not None and not (whole_number(step) is not None and 0 <= step <= MAX_RECORD_STEP):
        raise UserError(f"{where}={name}: trainer_state.json's global_step={short_repr(step)} is not a step (a whole "
                        f"number 0 to {MAX_RECORD_STEP})")
    if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, (int, float))
                              or not math.isfinite(epoch) or not 0 <= epoch <= MAX_RECORD_STEP):
        raise UserError(f"{where}={name}: trainer_state.json's epoch={short_repr(epoch)} is not an epoch (a finite "
                        "number >= 0)")
    return SavedModel(folder.resolve(), config, step, float(epoch) if epoch is not None else None)


def _json(path: Path, where: str, name: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise UserError(f"{where}={name}: {path.name} is unreadable ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}={name}: {path.name} is not a JSON object")
    return data


def check_series(config: Config) -> list[SavedModel]:
    """Every checkpoint of a trajectory read and checked before any work: missing, not a model,
    or another architecture or shape than the first (one UserError line each, the first found)."""
    saved = [read_saved(name, f"source.checkpoints[{i}]") for i, name in enumerate(config.source.checkpoints)]
    first = saved[0].shape()
    for i, s in enumerate(saved[1:], start=1):
        other = s.shape()
        diff = [k for k in dict.fromkeys([*first, *other]) if first.get(k) != other.get(k)]
        if diff:
            shown = ", ".join(f"{k}={other.get(k)!r} (first: {first.get(k)!r})" for k in diff[:3])
            raise UserError(f"source.checkpoints[{i}]={config.source.checkpoints[i]}: another architecture than the first "
                            f"checkpoint ({shown}); a trajectory is one model's checkpoints")
    if config.model.compact_vocab:
        raise UserError("model.compact_vocab: saved models keep their own vocabulary; set model.compact_vocab=false")
    steps = [s.step for s in saved]
    if not config.source.steps and all(s is not None for s in steps) and any(b <= a for a, b in zip(steps, steps[1:])):  # type: ignore[operator]
        i = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])  # type: ignore[operator]
        raise UserError(f"source.checkpoints[{i}]={config.source.checkpoints[i]}: global_step {steps[i]} in its "
                        f"trainer_state.json after {steps[i - 1]}: give the checkpoints in training order (by step: "
                        f"{', '.join(str(x) for x in sorted(steps))}), or their steps with --steps")  # type: ignore[type-var]
    return saved


def series_points(config: Config, saved: list[SavedModel]) -> list[tuple[int, float]]:
    """(step, epoch) of every checkpoint (read by :func:`check_series`): ``source.steps``, else
    trainer_state.json's global_step (every one of them; increasing, as checked), else the
    position; the epoch is trainer_state.json's when every checkpoint has one, else the step."""
    steps: list[int]
    if config.source.steps:
        steps = list(config.source.steps)
    elif all(s.step is not None for s in saved):  # increasing: check_series refuses any other order
        steps = [int(s.step) for s in saved]  # type: ignore[arg-type]
    else:
        steps = list(range(len(saved)))
    with_epochs = not config.source.steps and all(s.epoch is not None for s in saved) and steps == [s.step for s in saved]
    return [(step, float(s.epoch) if with_epochs and s.epoch is not None else float(step)) for step, s in zip(steps, saved)]


# ------------------------------------------------------------------ the lab's checkpoint series (contract.Series)
def checkpoint_folders(names: Sequence[str]) -> tuple[list[str], list[int | None]]:
    """(the checkpoints as absolute folder paths, the step each revision name carries): a local
    ``save_pretrained`` folder as it is; ``REPO@REVISION`` (a hub revision, e.g.
    ``EleutherAI/pythia-70m@step1000``) as its snapshot in the Hugging Face cache, downloaded
    first when it is not cached and the hub is reachable (:func:`~stagewise.lmkit.hub.hub_revision_folder`;
    one UserError line otherwise), its step read from a Pythia-style name (``step1000``)."""
    from ...lmkit.hub import hub_revision_folder, revision_step, split_hub_revision

    if not names:
        raise UserError("CKPT: give the model folders of one training run (or its hub revisions REPO@REV), in training order")
    folders: list[str] = []
    steps: list[int | None] = []
    for i, name in enumerate(names):
        subject = f"source.checkpoints[{i}]={name}"
        snapshot = hub_revision_folder(name, subject)
        if snapshot is None:
            folders.append(str(Path(name).expanduser().absolute()))
            steps.append(None)
            continue
        split = split_hub_revision(name, subject)
        folders.append(str(snapshot))
        steps.append(revision_step(split[1]) if split is not None else None)
    return folders, steps


def series_config(names: Sequence[str], steps: Sequence[int] | None) -> dict[str, Any]:
    """The overrides a trajectory forces (``Series.config``): ``source`` (``kind=trajectory``,
    the checkpoints as absolute folders, ``steps`` when given, else the steps of Pythia-style
    revision names when every checkpoint has one), ``model`` (the first checkpoint, its full
    vocabulary) and no baselines (trained by the lab only)."""
    folders, named = checkpoint_folders(names)
    source: dict[str, Any] = {"kind": "trajectory", "checkpoints": folders}
    if steps is not None:
        source["steps"] = list(steps)
    elif all(step is not None for step in named):
        source["steps"] = list(named)
    return {"source": source, "model": {"name": folders[0], "compact_vocab": False, "gguf_file": None},
            "baselines": {"kinds": []}}


def check_probe_sets(config: Config) -> None:
    """The probe sets in the first checkpoint's tokenizer (``Series.check``): one UserError line
    when no example is usable (e.g. no answer is one token), before any folder is made."""
    from ...lmkit.models import load_tokenizer

    tok = load_tokenizer(config.model.model_copy(update={"name": config.source.checkpoints[0]}))
    try:
        if config.task.name != "none":
            read_probe_data(config, tok, quiet=True)
        probe_sets(config, tok)
    except UserError as err:
        raise UserError(*(f"probe sets in the tokenizer of source.checkpoints[0]: {m}" for m in err.messages)) from None


def points(config: Config) -> list[tuple[int, float]]:
    """(step, epoch) of every checkpoint (``Series.points``): :func:`check_series`, then
    :func:`series_points`."""
    return series_points(config, check_series(config))


def part_config(config: Config, index: int, point: tuple[int, float]) -> dict[str, Any]:
    """The config (as data) of checkpoint ``index``'s own run: the trajectory's, with
    ``source.kind=checkpoint`` at the checkpoint's step and epoch and ``model.name`` its folder."""
    data = config.model_dump(mode="json")
    data["model"]["name"] = str(Path(config.source.checkpoints[index]).expanduser().resolve())
    data["source"] = {**data["source"], "kind": "checkpoint", "checkpoints": [], "steps": [], "step": point[0],
                      "epoch": point[1]}
    return data


def _load(config: Config, name: str, tokenizer: Any) -> LoadedModel:
    from ...engine import resolve_device, resolve_dtype
    from ...lmkit.models import build

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, ("float32", "bfloat16"), device)
    loaded = build(config.model.model_copy(update={"name": name}), seed=config.seed, dtype=dtype, tokenizer=tokenizer)
    loaded.model.to(device)
    loaded.model.eval()
    return loaded


def run_checkpoint(config: Config, ctx: RunContext) -> RunResult:
    """``source.kind=checkpoint``: the records of the saved model ``model.name`` at ``source.step``."""
    from ...lmkit.models import load_tokenizer

    tok = load_tokenizer(config.model)
    p = Probe(config, _load(config, config.model.name, tok))
    p.note(ctx)
    epoch = config.source.epoch if config.source.epoch is not None else float(config.source.step)
    p.record(ctx, config.source.step, epoch)
    return RunResult(p.extras())


def run_trajectory(config: Config, ctx: RunContext) -> RunResult:
    """``source.kind=trajectory``: each checkpoint in order, folded from its finished own run
    under ``parts/`` when there is one, else evaluated here; a resume checkpoint after each
    (a killed trajectory evaluates only the checkpoints after its last one)."""
    from ...config import config_hash
    from ...lmkit.models import load_tokenizer

    saved = check_series(config)
    points = series_points(config, saved)
    resume = ctx.resume_state()
    start = int(resume.meta["index"]) + 1 if resume is not None else 0
    tok = load_tokenizer(config.model.model_copy(update={"name": str(saved[0].folder)}))
    data = read_probe_data(config, tok) if config.task.name != "none" else None
    sets: list[Any] | None = None  # the own probe sets, read with the first model evaluated (one architecture)
    last: Probe | None = None
    with ctx.progress(len(saved), "checkpoints", start=start) as advance:
        for index in range(start, len(saved)):
            step, epoch = points[index]
            key = config_hash(Config.model_validate(part_config(config, index, points[index])))
            part = ctx.finished_part(part_key(index), key)
            if part is not None:
                fold(ctx, step, *part)
            else:
                last = None  # one model in memory at a time
                last = Probe(config, _load(config, str(saved[index].folder), tok), data=data, sets=sets)
                sets = last.sets
                last.record(ctx, step, epoch)
            ctx.save_checkpoint(index + 1, {"trajectory.index": torch.tensor([index])}, {"index": index, "step": step})
            advance()
    if last is None:  # every checkpoint folded or resumed: the facts come from the first one (same data, same vocabulary)
        last = Probe(config, _load(config, str(saved[0].folder), tok), data=data, sets=sets)
    last.note(ctx)
    return RunResult({**last.extras(points[-1][0]), "checkpoints": len(saved)})


def fold(ctx: RunContext, step: int, metrics: Any, tables: Any) -> None:
    """A finished checkpoint run's records into ``ctx`` at ``step``: its metrics (one step) and
    every table's rows (one part), values unchanged."""
    rows = metrics[metrics["step"] == step]
    if len(rows) != len(metrics):
        raise UserError(f"parts: a checkpoint run holds records at steps other than {step}; remove its folder and rerun")
    ctx.log(step, {str(m): torch.tensor([float(v)], dtype=torch.float64) for m, v in zip(rows["metric"], rows["value"])})
    for name in tables.names():
        frame = tables.get(name)
        if frame is not None and len(frame):
            ctx.log_table(name, frame, part=step)
