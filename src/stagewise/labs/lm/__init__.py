"""The language-model lab: real Hugging Face causal LMs fine-tuned on single-token answer
tasks (CounterFact, HotpotQA, BLiMP, SICK), per-example prediction categories per epoch,
BLiMP minimal-pair evaluation, attention surgery (rank reduction) and spectra.

The lab's contract value is :data:`.lab.LAB`; the pieces are importable on their own.
"""

from .adapters import AttentionAdapter, adapter_for
from .categories import CATEGORIES, AnswerSpace, answer_space, categorize
from .config import Config
from .models import LoadedModel, build, gpt2_bpe
from .tasks import Example, Sentence, load_examples, load_sentences

__all__ = [
    "CATEGORIES", "AnswerSpace", "AttentionAdapter", "Config", "Example", "LoadedModel", "Sentence", "adapter_for",
    "answer_space", "build", "categorize", "gpt2_bpe", "load_examples", "load_sentences",
]
