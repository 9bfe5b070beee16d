"""The stage code's imports, made ahead in one thread before the nightly runs pipelines side by side.

Stage code imports its model stack when it first computes (inside functions: a cached run never pays for
torch), and the nightly runs pipelines in threads of one process. Python's import locks are per module, so
two threads that first import torch by two routes (one through ``transformers`` or ``safetensors.torch``,
one directly) can each hold a module the other needs; CPython breaks that deadlock by handing one of them
the half-initialised module, and a stage fails with "partially initialized module 'torch' has no attribute
'Tensor' (most likely due to a circular import)" (seen in CI: c2c's ``cluster_pairs`` beside train_nmt).

So before two pipelines first run at once, ``import_ahead`` imports, in the calling thread, every module of
``tasks`` and ``models`` (their module-level imports) and ``STACK``: the third-party modules (and lazy
attributes, ``module:attr``) that stage code imports inside functions. tests/engine/test_imports.py checks that
``STACK`` lists every such import, so a new lazy import cannot bring the race back. Modules not installed
(an optional backend) are skipped.
"""

from __future__ import annotations

import importlib
import pkgutil

STACK = (
    "torch",
    "safetensors.torch",
    "tokenizers",
    "torchcrf",
    "numpy",
    # transformers resolves its classes lazily (an attribute access imports the submodule): each one used
    "transformers",
    "transformers:AutoConfig",
    "transformers:AutoModelForCausalLM",
    "transformers:AutoModelForMaskedLM",
    "transformers:AutoModelForSeq2SeqLM",
    "transformers:AutoModelForSequenceClassification",
    "transformers:AutoModelForTokenClassification",
    "transformers:AutoTokenizer",
    "transformers:GPT2Config",
    "transformers:GPT2LMHeadModel",
    "transformers:LogitsProcessorList",
    "transformers:PreTrainedTokenizerFast",
    "huggingface_hub",
    "sentence_transformers",
    "fairseq",
    "fairseq.checkpoint_utils",
    "fairseq.search",
    "fairseq.utils",
    "fairseq.data",
    "fairseq.dataclass.utils",
    "fairseq.sequence_generator",
    "fairseq.token_generation_constraints",
    "omegaconf",
    "ctranslate2",
    "ctranslate2.converters",
    "sentencepiece",
    "sacrebleu.metrics",
    "sacrebleu.significance",
    "sacremoses",
    "sacremoses.corpus",
    "sklearn.metrics",
    "seqeval.metrics",
    "seqeval.metrics.sequence_labeling",
    "nltk",
    "nltk.corpus.reader.wordnet",
    "kmedoids",
    "bs4",
    "py3langid.langid",
    "scipy.sparse",
    "lingua",
    "datasketch",
    "matplotlib",
    "prefect",
    "prefect.context",
    "prefect.cache_policies",
)

PACKAGES = ("tasks", "models")


def import_ahead() -> list[str]:
    """Import every module of ``PACKAGES`` and every entry of ``STACK`` in this thread; returns those that could
    not be imported (an optional package not installed)."""
    missing = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            try:
                importlib.import_module(info.name)
            except ImportError:  # a module of an optional backend whose package is not installed
                missing.append(info.name)
    for entry in STACK:
        module, _, attr = entry.partition(":")
        try:
            loaded = importlib.import_module(module)
            if attr:
                getattr(loaded, attr)
        except ImportError:
            missing.append(entry)
    return missing
