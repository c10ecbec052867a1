"""The pretraining study's settings (study.yaml), validated before anything runs.

Every number is fixed here or in the YAML before the runs; ``--set a.b=v`` changes one (the
study's folder records the resolved settings, and a study folder made with other settings is
refused, so a resumed study keeps its own).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stagewise.config import deep_merge
from stagewise.errors import UserError, validation_line
from stagewise.overrides import parse_overrides
from stagewise.yamlio import load_yaml


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Corpus(Strict):
    name: str = Field(pattern=r"^[a-z0-9_]{1,32}$")
    path: str = Field(description="the text file, relative to data_root (one document or line per line)")
    heldout_lines: int = Field(500, ge=10, description="the last N lines are held out (the probes' raw text)")


class TokenizerSettings(Strict):
    vocab_size: int = Field(4096, ge=260, le=65536)


class ModelSettings(Strict):
    n_layer: int = Field(2, ge=1, le=48)
    n_embd: int = Field(128, ge=8, le=4096)
    n_head: int = Field(4, ge=1, le=64)


class TrainSettings(Strict):
    steps: int = Field(1500, ge=1, le=10_000_000)
    batch_size: int = Field(32, ge=1, le=4096)
    seq_len: int = Field(128, ge=8, le=4096)
    lr: float = Field(1e-3, gt=0, le=1.0)
    warmup_steps: int = Field(100, ge=0)
    schedule: Literal["cosine", "linear", "constant_with_warmup"] = "cosine"
    weight_decay: float = Field(0.1, ge=0)
    threads: int = Field(1, ge=1, le=256, description="torch threads per run (runs go side by side on the cores)")
    save_steps: int = Field(250, ge=1, description="Trainer checkpoints (the resume point after a kill)")


class RecordSettings(Strict):
    schedule: Literal["log", "steps"] = "log"
    log_until: int = Field(512, ge=1)
    every: int = Field(250, ge=1, description="after log_until, every N steps")
    steps: list[int] | None = Field(None, description="schedule=steps: exactly these steps")


class ProbeSettings(Strict):
    pairs_per_paradigm: int = Field(100, ge=1, description="covered pairs kept per paradigm (the first ones)")
    min_count: int = Field(2, ge=1, description="a word is known to the corpus when seen this often")
    min_pairs: int = Field(50, ge=1, description="fewer covered pairs: the paradigm is not testable for the corpus")
    heldout_tokens: int = Field(8192, ge=64, description="tokens of held-out text per record (words and text probes)")
    suites: list[Literal["zorro", "blimp"]] = ["zorro", "blimp"]


class ExecutorSettings(Strict):
    kind: Literal["local", "ray", "slurm"] = "local"
    max_parallel: int = Field(2, ge=1)
    cluster: str = "auto"


class StudyConfig(Strict):
    data_root: str = Field("", description="the folder holding text/, zorro/, blimp/ (empty: $STAGEWISE_DATA or ../shared/data)")
    corpora: list[Corpus]
    seeds: list[int] = Field(min_length=1)
    arms: list[Literal["real", "shuffled"]] = ["real", "shuffled"]
    shuffle_seed: int = 20260
    tokenizer: TokenizerSettings = TokenizerSettings()
    model: ModelSettings = ModelSettings()
    train: TrainSettings = TrainSettings()
    records: RecordSettings = RecordSettings()
    probes: ProbeSettings = ProbeSettings()
    ngram_orders: list[int] = [1, 2, 3, 4]
    executor: ExecutorSettings = ExecutorSettings()

    def root(self) -> Path:
        root = Path(self.data_root or os.environ.get("STAGEWISE_DATA") or "../shared/data")
        if not root.is_dir():
            raise UserError(f"data_root={root}: no such folder (give --set data_root=DIR or $STAGEWISE_DATA: the folder "
                            "holding text/, zorro/ and blimp/)")
        return root

    def digest(self) -> str:
        """What the study's results depend on: every setting but where the data lie and where the runs execute."""
        kept = self.model_dump(mode="json", exclude={"data_root", "executor"})
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def load_config(path: Path, overrides: list[str]) -> StudyConfig:
    """The YAML file with ``a.b=v`` overrides, validated (one UserError line on any problem)."""
    data = deep_merge(load_yaml(path), parse_overrides(StudyConfig, overrides))
    try:
        return StudyConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(f"{path}: {validation_line(err)}") from None
