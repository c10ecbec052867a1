"""The language-model lab: real Hugging Face causal LMs fine-tuned on single-token answer
tasks (CounterFact, HotpotQA, BLiMP, SICK), per-example prediction categories per epoch,
BLiMP minimal-pair evaluation, attention surgery (rank reduction) and spectra.

The lab's contract value is :data:`.lab.LAB`; the pieces are importable on their own and
load on first use (PEP 562), so importing the lab's contract needs no torch. The model-weights
toolkit the lab uses (loading, per-head weights, surgery, spectra, export, BLiMP scoring) is
its own package, :mod:`stagewise.lmkit`; its names re-exported here are the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

if TYPE_CHECKING:
    from ...lmkit.adapters import AttentionAdapter, adapter_for
    from ...lmkit.models import LoadedModel, build, gpt2_bpe
    from .categories import CATEGORIES, AnswerSpace, answer_space, categorize
    from .config import Config
    from .tasks import Example, Sentence, load_examples, load_sentences
    from .twotask import LabelPrior, label_prior

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("AttentionAdapter", "adapter_for"), "...lmkit.adapters"),
    **dict.fromkeys(("CATEGORIES", "AnswerSpace", "answer_space", "categorize"), ".categories"),
    "Config": ".config",
    **dict.fromkeys(("LoadedModel", "build", "gpt2_bpe"), "...lmkit.models"),
    **dict.fromkeys(("Example", "Sentence", "load_examples", "load_sentences"), ".tasks"),
    **dict.fromkeys(("LabelPrior", "label_prior"), ".twotask"),
}

__all__ = [
    "CATEGORIES", "AnswerSpace", "AttentionAdapter", "Config", "Example", "LoadedModel", "Sentence", "adapter_for",
    "answer_space", "build", "categorize", "gpt2_bpe", "load_examples", "load_sentences", "LabelPrior", "label_prior",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
