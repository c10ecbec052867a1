"""From a config to what training needs: examples (or sentences), the model and tokenizer,
the encoded dataset and the answer space. Dropped examples are counted, printed and noted
in the manifest (``notes.dropped_multi_token``), never silent."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch

from ...engine import resolve_device, resolve_dtype
from ...errors import UserError
from ...lmkit.models import LoadedModel, build, load_tokenizer
from ...lmkit.readers import LOCAL_DATA_HINT
from ...lmkit.scoring import max_positions, prefix_token_id
from .categories import type_space
from .controls import frequency_matched
from .batching import Encoded, to_rows, tokenize
from .categories import AnswerSpace, answer_space, row_strings
from .config import DATA_ENV, Config
from .controls import split_part
from .twotask import HeldoutData, HeldoutSet, heldout_data, in_rows
from .tasks import (
    DEFAULT_FILES, SICK_ANSWERS, SICK_ANSWERS_YES_MAYBE_NO, Example, Sentence, default_path, load_examples, load_sentences,
    mixture, single_token_answers,
)


def task_path(cfg: Config, task: str) -> Path | None:
    """Where ``task``'s data is read from: data.paths.TASK > data.path > data.root's layout > None (hub)."""
    d = cfg.data
    if task in d.paths:
        return d.paths[task]
    if d.path is not None:
        return d.path
    root = d.resolved_root()
    return default_path(task, root) if root is not None else None


def check_layout(cfg: Config, task: str, path: Path | None) -> None:
    """One-line UserError, naming where the root came from and what to set, when ``task``'s
    file is taken from data.root's shared-data layout and is not there."""
    d = cfg.data
    if path is None or path.exists() or task in d.paths or d.path is not None:
        return
    env = os.environ.get(DATA_ENV)
    source = f"${DATA_ENV}" if env and Path(env).expanduser().resolve() == d.root else "data.root"
    raise UserError(f"{path}: not found; {source}={d.root} lacks {task}'s data ({DEFAULT_FILES[task]} of the shared-data layout); "
                    f"{LOCAL_DATA_HINT}")


def read_data(cfg: Config, *, heldout: bool = False) -> list[Example] | list[Sentence]:
    """Every task's examples (answer framing) or sentences (lm framing), mixed round-robin:
    the training examples, or with ``heldout`` the held-out ones (``task.heldout``, controls.py)."""
    t = cfg.task
    parts: dict[str, list[Any]] = {}
    for task in t.tasks():
        check_layout(cfg, task, task_path(cfg, task))
    for task in t.tasks():
        kwargs: dict[str, Any] = {"limit": t.limit_of(task), "split": t.sick_split}
        if task == "blimp":
            kwargs["paradigms"] = t.paradigms
        if task == "counterfact":
            kwargs.update(prompts=t.prompts, subject_repeat=t.subject_repeat, suffix=t.prompt_suffix)
        if task == "sick" and t.framing == "answer":
            kwargs["answers"] = SICK_ANSWERS if t.sick_answers == "labels" else SICK_ANSWERS_YES_MAYBE_NO
        loader = load_sentences if t.framing == "lm" else load_examples
        parts[task] = loader(task, task_path(cfg, task), **kwargs)
        if t.sample is not None:
            parts[task] = subsample(parts[task], t.sample, t.sample_seed)
        parts[task] = split_part(cfg, task, parts[task], heldout=heldout)  # issue 27: held out / permuted labels
    parts = {task: part for task, part in parts.items() if part}  # a task without held-out examples
    return mixture(parts) if len(parts) > 1 else next(iter(parts.values()), [])


def record_key(item_id: str, task: str) -> str:
    """The record an example or sentence comes from: CounterFact's case (3 prompts) and BLiMP's
    pair (good and bad) share one; every other item is its own record."""
    return item_id.rsplit("/", 1)[0] if task in ("counterfact", "blimp") else item_id


def subsample(items: list[Any], n: int, seed: int) -> list[Any]:
    """``n`` records of ``items`` drawn without replacement (seeded by ``seed``), every item
    of a drawn record kept, in file order; all of them when there are at most ``n``."""
    keys = list(dict.fromkeys(record_key(i.id, i.task) for i in items))
    if n >= len(keys):
        return items
    gen = torch.Generator().manual_seed(seed)
    chosen = {keys[j] for j in torch.randperm(len(keys), generator=gen)[:n].tolist()}
    return [i for i in items if record_key(i.id, i.task) in chosen]


@dataclass(frozen=True, eq=False)
class Prepared:
    loaded: LoadedModel
    encoded: Encoded
    space: AnswerSpace | None
    device: torch.device
    dropped: dict[str, int]
    replacement: dict[str, float | int] | None = None
    heldout: HeldoutSet | None = None  # task.heldout: the held-out examples and minimal pairs (twotask.py)

    @property
    def examples(self) -> dict[str, int]:
        """Examples per task."""
        return {task: int((self.encoded.task == i).sum()) for i, task in enumerate(self.encoded.tasks)}

    def note(self, ctx: Any) -> None:
        """The data's facts into the run's manifest notes: dropped multi-token answers, replaced
        answers, the open type rule's exclusions, the examples per task."""
        ctx.note("dropped_multi_token", self.dropped)
        if self.replacement is not None:
            ctx.note("replaced_answers", self.replacement)
        if self.space is not None and self.space.types is not None:
            ctx.note("type_rule_excluded", self.space.types.excluded)
        ctx.note("examples", self.examples)

    def extras(self, steps: int | None) -> dict[str, Any]:
        """The RunResult extras the summary reads, after ``steps`` optimizer steps."""
        types = self.space.types if self.space is not None else None
        return {"model": self.loaded.name, "examples": self.examples, "dropped": self.dropped, "steps": steps,
                "vocab_rows": self.loaded.vocab_size, "replaced_answers": self.replacement,
                "type_rule_excluded": types.excluded if types is not None else None}


@dataclass(frozen=True, eq=False)
class Tokenized:
    """The data in *original* token ids (before any compact-vocabulary mapping)."""

    items: list[Any]
    ids: torch.Tensor  # (N, L_max) right-padded with 0
    lengths: torch.Tensor  # (N,)
    targets: torch.Tensor  # (N,) the answer's id, -1 in the lm framing
    dropped: dict[str, int]
    replacement: dict[str, float | int] | None = None  # task.replace_answers: controls.Replacement.as_dict()

    def used_ids(self) -> torch.Tensor:
        real = torch.arange(self.ids.shape[1])[None, :] < self.lengths[:, None]  # (N, L_max)
        return torch.cat([self.ids[real], self.targets[self.targets >= 0]])


def tokenize_data(cfg: Config, tok: Any, *, quiet: bool = False) -> Tokenized:
    """Read the data, drop multi-token answers (counted and printed), tokenize in one call."""
    data = read_data(cfg)
    lm = cfg.task.framing == "lm"
    dropped: dict[str, int] = {}
    answers: list[str] = []
    replacement = None
    if lm:
        texts = [s.text for s in cast("list[Sentence]", data)]  # read_data reads sentences in the lm framing
    else:
        examples, dropped = single_token_answers(cast("list[Example]", data), tok)  # and examples in the answer framing
        if cfg.task.replace_answers:
            examples, plan = frequency_matched(examples, cfg.seed)
            replacement = plan.as_dict()
        data = examples
        if not quiet:
            shown = ", ".join(f"{task} {n}" for task, n in dropped.items())
            print(f"lm: dropped examples whose answer is not one token: {shown}", file=sys.stderr)
        if not data:
            what = "nothing to train on" if cfg.source.kind == "train" else "the probe sets have no usable row"
            raise UserError(f"no example has a one-token answer for this tokenizer; {what}")
        texts, answers = [e.prompt for e in examples], [e.answer for e in examples]
    ids, lengths = tokenize(tok, texts, prefix=prefix_token_id(tok) if lm else None)  # BOS, else EOS
    if (lengths < (2 if lm else 1)).any():
        bad = data[int(torch.nonzero(lengths < (2 if lm else 1))[0, 0])]
        raise UserError(f"example {bad.id}: empty after tokenization")
    if lm:
        targets = torch.full((len(data),), -1, dtype=torch.long)
    else:  # one tokenizer call; every answer is one token here
        targets = torch.tensor([r[0] for r in tok(answers, add_special_tokens=False)["input_ids"]])
    return Tokenized(data, ids, lengths, targets, dropped, replacement)


def encode(cfg: Config, data: Tokenized, loaded: LoadedModel) -> tuple[Encoded, AnswerSpace | None]:
    """The dataset in the model's rows and the answer space (groups shuffled for the control)."""
    tok = loaded.tokenizer
    limit = max_positions(loaded.model)
    if limit is not None and int(data.lengths.max()) > limit:
        raise UserError(f"the longest prompt has {int(data.lengths.max())} tokens; the model's context is {limit} "
                        f"(raise model.tiny.n_positions or use task.limit)")
    table = loaded.to_compact()
    if table is not None and bool((table[data.used_ids()] < 0).any()):
        raise UserError("the data uses token ids outside the model's compact vocabulary (another dataset than the run's?)")
    lm = cfg.task.framing == "lm"
    pad = int(to_rows(torch.tensor([tok.pad_token_id]), table)[0])
    tasks = tuple(cfg.task.tasks())
    task_index = {name: i for i, name in enumerate(tasks)}
    items = data.items
    encoded = Encoded(ids=to_rows(data.ids, table), lengths=data.lengths,
                      targets=to_rows(data.targets, table) if not lm else data.targets,
                      task=torch.tensor([task_index[e.task] for e in items], dtype=torch.long), tasks=tasks,
                      example_ids=tuple(e.id for e in items), pad=pad)
    space = None
    if not lm:
        strings = row_strings(tok, loaded.vocab_ids, loaded.vocab_size)
        shuffle = cfg.seed if cfg.task.shuffle_groups else None
        answers, groups = [e.answer for e in items], [e.group for e in items]
        space = replace(answer_space(answers, groups, strings, shuffle_seed=shuffle),
                        types=type_space([e.task for e in items], groups, [e.original_answer or e.answer for e in items],
                                         strings, shuffle_seed=shuffle))
    return encoded, space


def read_probe_data(cfg: Config, tok: Any, *, quiet: bool = False) -> tuple[Tokenized, HeldoutData | None]:
    """The run's data in ``tok``'s ids: the training (or probe) examples, multi-token answers
    dropped and counted, and with ``task.heldout`` the held-out examples and minimal pairs."""
    data = tokenize_data(cfg, tok, quiet=quiet)
    held = heldout_data(cfg, tok, data.items, cast("list[Example]", read_data(cfg, heldout=True))) if cfg.task.heldout else None
    return data, held


def prepare_for(cfg: Config, data: Tokenized, held: HeldoutData | None, loaded: LoadedModel,
                device: torch.device) -> Prepared:
    """``data`` (and ``held``) encoded in the rows of ``loaded``'s model, with the answer space;
    the model is moved to ``device``."""
    encoded, space = encode(cfg, data, loaded)
    loaded.model.to(device)
    return Prepared(loaded, encoded, space, device, data.dropped, data.replacement,
                    in_rows(cfg, held, loaded) if held is not None else None)


def prepare(cfg: Config, *, quiet: bool = False) -> Prepared:
    """Tokenizer, data (multi-token answers dropped and counted), the (compact) model, the
    encoded dataset and the answer space, on the run's device."""
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, ("float32", "bfloat16"), device)
    tok = load_tokenizer(cfg.model)
    data, held = read_probe_data(cfg, tok, quiet=quiet)
    used = data.used_ids() if held is None else torch.cat([data.used_ids(), held.used_ids()])  # held-out words in the vocabulary
    loaded = build(cfg.model, seed=cfg.seed, dtype=dtype, used_ids=used if cfg.model.compact_vocab else None, tokenizer=tok)
    return prepare_for(cfg, data, held, loaded, device)
