"""Config of the language-model lab. Tags in descriptions: [paper] the disentangled-feature
paper's GPT-2 setting (Gong et al. 2025) or its public code, [spec] our spec's fix of that
code, [default] our choice."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...config import MAX_SEED, MAX_STEPS, ConfigModel, ProbeSource, RunBase, TrainBase
from ...lmkit.config import ModelConfig

TaskName = Literal["counterfact", "hotpotqa", "blimp", "sick"]
DEFAULT_MIXTURE: tuple[TaskName, ...] = ("blimp", "sick")  # task.mixture's default
TASKS: tuple[str, ...] = ("counterfact", "hotpotqa", "blimp", "sick")
QUESTION_TASKS: tuple[str, ...] = ("counterfact", "hotpotqa")
"""Tasks whose answers have types (a question's answer): the type claims concern only their predictions."""
DATA_ENV = "STAGEWISE_DATA"  # default for data.root: a folder in the layout of the project's shared data
MAX_EPOCHS = 100_000


SPLIT_TASKS = ("blimp", "sick")
"""Tasks that ``task.heldout`` and ``task.permute_labels`` apply to (classification tasks)."""


def check_task_config(task: Any) -> None:
    """Raises ValueError (one line; the config layer prefixes the field) for a ``task`` config
    section whose held-out or permuted-labels settings cannot apply. Data-dependent checks
    (a paradigm name not in the data) happen when the data is read (:func:`split_part`)."""
    tasks = task.tasks()
    split = task.heldout is not None or task.permute_labels
    other = [t for t in tasks if t not in SPLIT_TASKS]
    if split and other:
        what = "task.heldout" if task.heldout is not None else "task.permute_labels"
        raise ValueError(f"{what}: only blimp and sick are split and permuted (this run has {', '.join(other)})")
    if split and task.framing != "answer":
        raise ValueError("task.heldout / task.permute_labels: only for task.framing=answer (labels and their priors)")
    if task.heldout_paradigms is not None:
        if task.heldout is None:
            raise ValueError("task.heldout_paradigms needs task.heldout (the held-out share of SICK's pairs), e.g. 0.25")
        if "blimp" not in tasks:
            raise ValueError(f"task.heldout_paradigms: blimp is not among the run's tasks ({', '.join(tasks)})")
        if not task.heldout_paradigms:
            raise ValueError("task.heldout_paradigms=[]: name at least one BLiMP paradigm (or null for a seeded share)")
        if task.paradigms is not None:
            missing = [p for p in task.heldout_paradigms if p not in task.paradigms]
            if missing:
                raise ValueError(f"task.heldout_paradigms: {missing[0]!r} is not among task.paradigms")


class TaskConfig(ConfigModel):
    name: Literal["counterfact", "hotpotqa", "blimp", "sick", "mixture", "none"] = Field(
        "counterfact", description="counterfact / hotpotqa [paper]; blimp (acceptability) / sick (entailment) [spec, the proposed\n"
        "follow-up]; mixture: the tasks in task.mixture, interleaved; none: no lab task, only the probes of a model\n"
        "trained elsewhere [ours, issue 39]")
    framing: Literal["answer", "lm"] = Field("answer", description="answer: predict the answer's one token after the prompt [paper];\n"
                                             "lm: plain next-token loss on the task's sentences (blimp, sick) [spec]")
    mixture: list[TaskName] = Field(default_factory=lambda: list(DEFAULT_MIXTURE), description="tasks of task.name=mixture")
    limit: int | None = Field(None, ge=1, description="first N records per task (CounterFact: 3 examples per record; BLiMP:\n"
                              "N pairs per paradigm, 2 examples each; SICK: N pairs of the split)")
    limits: dict[TaskName, int] = Field(default_factory=dict, description="per-task limits (over task.limit), e.g. {blimp: 10, sick: 1340}")
    paradigms: list[str] | None = Field(None, description="BLiMP paradigms (file stems); null = all 67")
    sick_split: Literal["TRAIN", "TRIAL", "TEST", "all"] = Field("TRAIN", description="SICK's SemEval_set")
    sick_answers: Literal["labels", "yes-maybe-no"] = Field(
        "labels", description="SICK's answer words: labels (' entailment' / ' neutral' / ' contradiction' [spec]; ' entailment'\n"
        "is two GPT-2 tokens, so those examples are dropped and counted) or yes-maybe-no (one GPT-2 token each)")
    shuffle_groups: bool = Field(False, description="control: permute the answers' group labels across relations (seeded by\n"
                                 "seed), so that 'type-correct' no longer means 'an answer of the same relation'")
    replace_answers: bool = Field(False, description="control: replace every answer by another answer of the data of another\n"
                                  "type and the nearest frequency rank (a seeded permutation: frequencies kept, types broken)")
    sample: int | None = Field(None, ge=1, description="a random subset of N records per task, drawn with task.sample_seed after\n"
                               "task.limit (null: every record, in file order)")
    sample_seed: int = Field(0, ge=0, lt=MAX_SEED, description="seed of task.sample (the subsample axis of a seeds study)")
    heldout: float | None = Field(None, gt=0, lt=1, description="held-out share, evaluated every record and never trained on\n"
                                  "(controls.py): BLiMP's paradigms (whole paradigms), SICK's pairs (stratified by label) [ours]")
    heldout_paradigms: list[str] | None = Field(None, description="the held-out BLiMP paradigms by name (over task.heldout's\n"
                                                "seeded share of them)")
    heldout_seed: int = Field(0, ge=0, lt=MAX_SEED, description="seed of the held-out split")
    permute_labels: bool = Field(False, description="control: permute the labels within each task and part (seeded by seed):\n"
                                 "label marginals kept, the input-label relation removed [ours]")
    prompts: Literal["all", "rewrite", "paraphrase"] = Field(
        "all", description="counterfact's prompts per record: all (the rewrite template and its 2 paraphrases) [spec]; rewrite\n"
        "(the template only); paraphrase (the 2 paraphrases only: a noise sentence first, the relation in varied wording; the\n"
        "mechanism test's harder type cue) [ours, issue 38]")
    subject_repeat: int = Field(1, ge=1, le=8, description="counterfact: each prompt starts with its subject repeated k - 1 times\n"
                                "('Angola. Angola is located in' at k = 2): the mechanism test's easier facts [ours, issue 38]")

    prompt_suffix: str = Field("", max_length=64, description="counterfact: a fixed text appended to every prompt (e.g. '; answer:'):\n"
                               "the relation no longer sits in the last tokens; the mechanism test's moved cue [ours, issue 38]")

    ADDED = ("replace_answers", "sample", "sample_seed", "heldout", "heldout_paradigms", "heldout_seed", "permute_labels",
             "prompts", "subject_repeat", "prompt_suffix")

    def tasks(self) -> list[TaskName]:
        if self.name == "none":
            return []
        return list(dict.fromkeys(self.mixture)) if self.name == "mixture" else [self.name]

    def limit_of(self, task: TaskName) -> int | None:
        return self.limits.get(task, self.limit)

    @model_validator(mode="after")
    def _check(self):
        if self.framing == "lm" and any(t not in ("blimp", "sick") for t in self.tasks()):
            raise ValueError(f"task.framing=lm: only blimp and sick have an lm framing, got {', '.join(self.tasks())}")
        if any(v < 1 for v in self.limits.values()):
            raise ValueError(f"task.limits={dict(self.limits)}: limits are >= 1")
        if self.name == "mixture" and not self.mixture:
            raise ValueError("task.name=mixture needs task.mixture=[...] (e.g. [blimp, sick])")
        check_task_config(self)
        if (self.prompts != "all" or self.subject_repeat != 1 or self.prompt_suffix) and self.tasks() != ["counterfact"]:
            raise ValueError(f"task.prompts={self.prompts} / task.subject_repeat={self.subject_repeat} / task.prompt_suffix="
                             f"{self.prompt_suffix!r}: counterfact's prompt variants, for task.name=counterfact only (this run "
                             f"has {', '.join(self.tasks())})")
        return self


def _env_root() -> Path | None:
    """data.root's default: $STAGEWISE_DATA when set (resolved into the config, so the run's
    hash and its resume use the folder it was started with)."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser().resolve() if env else None


class DataConfig(ConfigModel):
    root: Path | None = Field(default_factory=_env_root, description=f"a folder in the shared-data layout (counterfact/, hotpotqa/,\n"
                              f"blimp/, sick/); default: ${DATA_ENV}; with neither, the hub datasets are used")
    path: Path | None = Field(None, description="the task's own file or folder (single-task runs)")
    paths: dict[TaskName, Path] = Field(default_factory=dict, description="per-task files or folders (mixtures)")

    @field_validator("root", "path")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        """Stored absolute, so that --resume works from any directory."""
        return value.expanduser().resolve() if value is not None else None

    @field_validator("paths")
    @classmethod
    def _absolute_all(cls, value: dict[str, Path]) -> dict[str, Path]:
        return {k: v.expanduser().resolve() for k, v in value.items()}

    def resolved_root(self) -> Path | None:
        return self.root


class TrainConfig(TrainBase):
    ADDED = ("record", "tf32", "eval_epochs")
    optimizer: Literal["adamw", "adam", "sgd"] = Field("adamw", description="[paper: AdamW]")
    tf32: bool = Field(False, description="[default] allow TF32 matmuls on CUDA (faster, ~1e-3 relative error); off unless asked")
    lr: float = Field(5e-6, gt=0, allow_inf_nan=False, description="learning rate [paper: 5e-6]")
    schedule: Literal["constant", "exponential", "cosine"] = Field(
        "constant", description="constant [paper, CounterFact]; exponential: lr x gamma per epoch [paper, HotpotQA: 0.95];\n"
        "cosine: to 0 over the epochs")
    gamma: float = Field(0.95, gt=0, le=1, allow_inf_nan=False, description="per-epoch factor of schedule=exponential [paper: 0.95]")
    momentum: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False, description="sgd momentum")
    weight_decay: float = Field(0.01, ge=0, allow_inf_nan=False, description="decoupled weight decay [paper code: torch AdamW's default 0.01]")
    batch_size: int = Field(32, ge=1, le=65536, description="[paper: 32]")
    eval_batch_size: int = Field(128, ge=1, le=65536, description="batch of the per-epoch evaluation")
    epochs: int = Field(10, ge=0, le=MAX_EPOCHS, description="epochs; 0 runs only the epoch-0 evaluation")
    shuffle: bool = Field(False, description="reshuffle the examples every epoch (seeded); false = dataset order [paper]")
    padding: Literal["left", "right"] = Field("left", description="padding side; both use attention masks and read each prompt's true last token")
    reproduce_original_padding: bool = Field(False, description="the authors' defect, for comparison: right padding with EOS,\n"
                                             "no attention mask, logits read at the padded last position")
    grad_clip: float | None = Field(None, gt=0, allow_inf_nan=False, description="clip the global gradient norm")
    record: Literal["eval-after-epoch", "train-before-step"] = Field(
        "eval-after-epoch", description="what an epoch's predictions are: eval-after-epoch: the whole training set in eval mode\n"
        "after the epoch (and at epoch 0, before training) [spec]; train-before-step: the training forward pass (train mode,\n"
        "dropout on) of each batch before its update, gathered over the epoch [paper code: the authors' recording]")
    eval_every: int = Field(0, ge=0, le=MAX_STEPS, description="also evaluate every k optimizer steps inside epochs (records at\n"
                            "fractional epochs step / steps_per_epoch; 0: at epoch ends only) [default; for real models,\n"
                            "whose few epochs are too coarse to order the categories]")
    eval_epochs: list[int] = Field(default_factory=list, description="with train.record=train-before-step: also evaluate the\n"
                                   "whole training set in eval mode after these epochs (0: before training), into the\n"
                                   "eval_predictions table and eval.* metrics, e.g. log-spaced [1, 2, 3, 5, 8, ...] [ours]")
    top_k: int = Field(10, ge=1, le=1000, description="top-k token ids and probabilities kept per example and epoch")
    snapshot_epochs: list[int] = Field(default_factory=list, description="epochs whose model weights are kept in snapshots/\n"
                                       "(for lm rank-curve RUN@EPOCH); the last epoch is always kept")
    spectra_every: int = Field(0, ge=0, le=MAX_STEPS, description="attention spectra every k optimizer steps (0: off)")
    checkpoint_every: int = Field(1, ge=1, le=MAX_EPOCHS, description="resume checkpoint every k epochs (and on SIGINT/SIGTERM, at the next step)")
    log_every: int = Field(10, ge=1, le=MAX_STEPS, description="log the training loss every k optimizer steps")

    @field_validator("snapshot_epochs")
    @classmethod
    def _sorted(cls, value: list[int]) -> list[int]:
        if any(e < 0 for e in value):
            raise ValueError(f"train.snapshot_epochs={value}: epochs are >= 0")
        return sorted(set(value))


class Thresholds(ConfigModel):
    """The claims' thresholds, fixed before any run (see docs/lm.md)."""

    half: float = Field(0.5, gt=0, lt=1, description="'falls to half' / 'reaches half': the fraction used by both claims")
    type_rule: Literal["open", "closed", "user"] = Field(
        "open", description="the type rule the type claims are judged by: open (the prompt's declared answer type, lexicons;\n"
        "categories.py) or closed (another answer of the same group in the loaded sample) [ours; both are reported];\n"
        "user: a tracked run's own rule (source.categorize, the researcher's function)")

    ADDED = ("type_rule",)


class BaselineConfig(ConfigModel):
    """The no-attention baselines trained beside the model (baselines.py): the type claims' controls."""

    kinds: list[Literal["bow", "bow-last"]] = Field(
        default_factory=list, description="baselines trained on the same batches: bow (mean bag of words -> linear\n"
        "softmax), bow-last (the bag plus the last k tokens' embeddings -> linear softmax) [ours, issue 27]; [] = none")
    last_k: int = Field(2, ge=1, le=16, description="tokens of the prompt's end that bow-last reads in place")
    d: int = Field(64, ge=1, le=4096, description="the baselines' embedding width")
    lr: float | None = Field(None, gt=0, allow_inf_nan=False, description="the baselines' learning rate (null: train.lr);\n"
                             "same optimizer kind, weight decay and schedule as the model")
    lr_grid: list[float] = Field(default_factory=list, description="train every baseline at each of these rates in the same run\n"
                                 "(records 'bow-last2@lr0.01', ...); the difference claims are judged against the rate strongest\n"
                                 "for the alternative and reported at every rate [ours, issue 38]; [] = the one rate baselines.lr")

    ADDED = ("lr_grid",)

    @field_validator("lr_grid")
    @classmethod
    def _rates(cls, value: list[float]) -> list[float]:
        if any(not (0 < r < float("inf")) for r in value):
            raise ValueError(f"baselines.lr_grid={value}: rates are finite and > 0")
        return sorted(set(value))

    def rates(self) -> list[float | None]:
        """The rates the baselines train at: the grid, else [None] (one baseline per kind at baselines.lr or train.lr)."""
        return list(self.lr_grid) if self.lr_grid else [None]

    @field_validator("kinds")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


class SourceConfig(ProbeSource):
    """Where the run's model comes from (:class:`~stagewise.config.ProbeSource`: the lab trains
    it, or measures a model trained elsewhere), with the lm lab's own probe settings: per-head
    attention spectra at every record, and a tracked run's own category function."""

    spectra: bool = Field(False, description="tracked/checkpoint/trajectory: per-head attention spectra at every record")
    categorize: str | None = Field(None, description="tracked: the name of the researcher's own category function (its\n"
                                   "records are category_user; thresholds.type_rule=user judges the claims by it)")

    @model_validator(mode="after")
    def _check_lm(self):
        if self.categorize is not None and self.kind != "tracked":
            raise ValueError("source.categorize: a researcher's own category function, only for source.kind=tracked")
        if self.kind == "train" and self.spectra:
            raise ValueError("source.spectra: only when the model is trained elsewhere (source.kind != train)")
        return self


PROBE_KINDS: tuple[str, ...] = ("questions", "text", "pairs", "words")
ORDER_CONDITION = re.compile(r"^\s*(?P<metric>[A-Za-z0-9_.\-]+)\s*(?P<relation>>=|<=)\s*(?P<threshold>[-+0-9.eE]+)\s*$")
"""An order claim's condition: ``METRIC >= X`` or ``METRIC <= X`` (a probe metric, a number)."""


class ProbeSetConfig(ConfigModel):
    """One of a researcher's own probe sets (:mod:`stagewise.lmkit.probesets`), measured at every
    record of a model trained elsewhere; its records are ``probe.{name}.{record}`` [ours, issue 39]."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the set's name in the records (probe.NAME.*)")
    kind: Literal["questions", "text", "pairs", "words"] = Field(
        description="questions: a JSONL of {prompt, answer, group?, kind?} (loss, accuracy, category shares, per group);\n"
                    "text: held-out plain text (loss per token, by frequency bucket); pairs: minimal pairs, BLiMP or Zorro\n"
                    "or a JSONL of {good, bad, group, field?} (accuracy, per field and paradigm); words: held-out plain\n"
                    "text with a word-class lexicon (shares of exact / same-class / other top-1 words)")
    path: Path | None = Field(None, description="the file (questions, text, words) or folder or .jsonl file (pairs; null:\n"
                              "data.root's blimp/)")
    limit: int | None = Field(None, ge=1, description="questions: the first N rows; text, words: the first N tokens (null:\n"
                              "16384); pairs: the first N pairs per paradigm")
    paradigms: list[str] | None = Field(None, description="pairs: the paradigms (file stems; null: all)")
    window: int = Field(128, ge=1, le=1 << 20, description="text, words: tokens per window (each after the prefix token)")
    buckets: int = Field(4, ge=1, le=64, description="text: token-frequency buckets (1: the most frequent)")
    frequency: Path | None = Field(None, description="text: the reference text whose counts rank the tokens (e.g. the\n"
                                   "training corpus; null: the probe text itself)")
    categories: list[str] = Field(default_factory=list, description="questions: the category names a researcher's\n"
                                  "categorize function returns (Tracker(categorizers={NAME: fn})), shares probe.NAME.share.C")
    classes: Path | None = Field(None, description="words: the word-class lexicon, a JSON object {lower-cased word: CLASS}\n"
                                 "(stagewise.lmkit.wordclasses.tag_lexicon writes one)")

    @model_validator(mode="after")
    def _check(self):
        if self.kind != "questions" and self.categories:
            raise ValueError(f"probes[{self.name}].categories: only for kind=questions (this is {self.kind})")
        if self.kind != "pairs" and self.paradigms is not None:
            raise ValueError(f"probes[{self.name}].paradigms: only for kind=pairs (this is {self.kind})")
        if self.kind != "text" and (self.frequency is not None or self.buckets != 4):
            raise ValueError(f"probes[{self.name}].buckets/frequency: only for kind=text (this is {self.kind})")
        if self.kind not in ("text", "words") and self.window != 128:
            raise ValueError(f"probes[{self.name}].window: only for kind=text or words (this is {self.kind})")
        if (self.classes is not None) != (self.kind == "words"):
            raise ValueError(f"probes[{self.name}].classes: " + ("give the word-class lexicon file (a JSON object {word: "
                             "CLASS})" if self.kind == "words" else f"only for kind=words (this is {self.kind})"))
        if self.kind != "pairs" and self.path is None:
            raise ValueError(f"probes[{self.name}].path: give the {self.kind} file")
        bad = next((c for c in self.categories if not re.match(r"^[A-Za-z0-9_-]{1,64}$", c)), None)
        if bad is not None:
            raise ValueError(f"probes[{self.name}].categories: {bad!r} is not a name (letters, digits, '_' and '-')")
        return self


class OrderClaimConfig(ConfigModel):
    """A researcher's order claim on two probe metrics, declared before the run: ``first``
    reaches its threshold before ``then`` reaches its own (claim ``probe_order_{id}``) [ours, issue 39]."""

    id: str = Field(pattern=r"^[A-Za-z0-9_]{1,64}$", description="the claim's case name (probe_order_ID)")
    first: str = Field(description="METRIC >= X or METRIC <= X, e.g. 'probe.blimp.field.morphology.accuracy >= 0.6'")
    then: str = Field(description="the condition that should be reached later, e.g. 'probe.facts.accuracy >= 0.2'")
    sustain: int = Field(2, ge=1, le=1000, description="records in a row the condition must hold from its reach record")

    @field_validator("first", "then")
    @classmethod
    def _condition(cls, value: str) -> str:
        match = ORDER_CONDITION.match(value)
        if match is None:
            raise ValueError("write METRIC >= X or METRIC <= X (e.g. 'probe.blimp.accuracy >= 0.6')")
        try:
            number = float(match["threshold"])
        except ValueError:
            raise ValueError(f"{match['threshold']!r} is not a number") from None
        if not math.isfinite(number):
            raise ValueError("the threshold must be finite")
        return value.strip()

    def condition(self, which: str) -> tuple[str, str, float]:
        """(metric, relation, threshold) of ``first`` or ``then``."""
        match = ORDER_CONDITION.match(getattr(self, which))
        assert match is not None
        return match["metric"], match["relation"], float(match["threshold"])


class Config(RunBase):
    ADDED = ("baselines", "source", "probes", "order")
    n_seeds: int = Field(1, ge=1, le=1, description="one model per run (sweep seeds to get several)")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="training/eval dtype; bfloat16 only on cuda")
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    baselines: BaselineConfig = Field(default_factory=BaselineConfig)
    source: SourceConfig = Field(default_factory=SourceConfig)
    probes: list[ProbeSetConfig] = Field(default_factory=list, description="a researcher's own probe sets, measured at every\n"
                                         "record of a model trained elsewhere (source.kind != train) [ours, issue 39]")
    order: list[OrderClaimConfig] = Field(default_factory=list, description="order claims on two probe metrics, judged from\n"
                                          "the records (claim probe_order_ID) [ours, issue 39]")

    @model_validator(mode="after")
    def _check(self):
        if self.probes and self.source.kind == "train":
            raise ValueError("probes: a researcher's own probe sets are measured on a model trained elsewhere (a Tracker, "
                             "the Trainer callback, a trajectory), not in the lab's own training (source.kind=train)")
        if self.task.name == "none" and self.source.kind == "train":
            raise ValueError("task.name=none: no lab task, only a tracked run's own probe sets; the lab's own training "
                             "needs a task")
        if self.task.name == "none" and not self.probes:
            raise ValueError("task.name=none: give the probe sets to measure instead (probes: [{name, kind, path}, ...])")
        names = [p.name for p in self.probes]
        if len(set(names)) != len(names):
            raise ValueError(f"probes: the name {next(n for n in names if names.count(n) > 1)!r} repeats; one name per set")
        ids = [o.id for o in self.order]
        if len(set(ids)) != len(ids):
            raise ValueError(f"order: the id {next(i for i in ids if ids.count(i) > 1)!r} repeats; one id per claim")
        if self.thresholds.type_rule == "user" and self.source.categorize is None:
            raise ValueError("thresholds.type_rule=user: the claims are judged by a tracked run's own category function "
                             "(Tracker(categorize=...), recorded as source.categorize)")
        if self.source.kind != "train":
            if self.baselines.kinds:
                raise ValueError(f"baselines.kinds={self.baselines.kinds}: the baselines are trained by the lab; a model "
                                 f"trained elsewhere (source.kind={self.source.kind}) has none (set baselines.kinds=[])")
            if self.train.record != "eval-after-epoch":
                raise ValueError("train.record=train-before-step: the lab's own training pass; a probe evaluates in eval mode")
        if self.baselines.lr_grid and self.baselines.lr is not None:
            raise ValueError(f"baselines.lr={self.baselines.lr} and baselines.lr_grid={self.baselines.lr_grid}: give one rate or a "
                             "grid, not both")
        if self.baselines.kinds and self.task.framing == "lm":
            raise ValueError(f"baselines.kinds={self.baselines.kinds}: baselines predict an answer token; task.framing=lm "
                             "has none (set baselines.kinds=[])")
        if self.data.path is not None and len(self.task.tasks()) > 1:
            raise ValueError("data.path names one task's file; a mixture takes data.paths.TASK=... (or data.root)")
        unused = sorted(set(self.data.paths) - set(self.task.tasks()))
        if unused:
            raise ValueError(f"data.paths: {', '.join(unused)} not among the run's tasks ({', '.join(self.task.tasks())})")
        if self.train.snapshot_epochs and self.train.snapshot_epochs[-1] > self.train.epochs:
            raise ValueError(f"train.snapshot_epochs={self.train.snapshot_epochs}: beyond train.epochs={self.train.epochs}")
        if self.train.record == "train-before-step" and self.task.framing == "lm":
            raise ValueError("train.record=train-before-step: only for task.framing=answer (the authors' answer records)")
        if self.train.eval_epochs and self.train.record != "train-before-step":
            raise ValueError(f"train.eval_epochs={self.train.eval_epochs}: extra evaluations beside the authors' recording "
                             "(train.record=train-before-step); eval-after-epoch already evaluates every epoch")
        if self.train.eval_epochs and (min(self.train.eval_epochs) < 0 or max(self.train.eval_epochs) > self.train.epochs):
            raise ValueError(f"train.eval_epochs={self.train.eval_epochs}: epochs between 0 and train.epochs={self.train.epochs}")
        if self.train.record == "train-before-step" and self.train.eval_every:
            raise ValueError(f"train.eval_every={self.train.eval_every}: evaluations inside epochs are eval-mode passes; "
                             "train.record=train-before-step records the training pass (set train.eval_every=0)")
        if self.train.reproduce_original_padding and self.task.framing == "lm":
            raise ValueError("train.reproduce_original_padding: only for task.framing=answer")
        return self
