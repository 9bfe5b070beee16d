"""Text classifiers trained step by step on the batches a caller hands them (the paraphrase curriculum).

Three kinds behind one interface (``TextClassifier``: ``train_step``, ``predict``, ``save``; ``base``):

- ``builtin`` (``bag``): hand-written, a fastText-style bag of hashed n-grams (an ``EmbeddingBag`` with
  sparse gradients and one linear layer): no maintained package offers a torch fastText that takes one
  optimiser step on a given batch.
- ``sentence_embedding`` (``sentence_embedding``): a frozen ``SentenceTransformer`` encoder (a name or a
  local path) and a trained head, each text's embedding memoised.
- ``hf`` (``hf``): a Hugging Face ``AutoModelForSequenceClassification`` fine-tuned whole with ``AdamW``.

Every kind is deterministic for a ``seed``, and leaves torch's global generators as they were.
``build_classifier`` / ``load_classifier`` (``build``) make a new one or read back what ``save`` wrote
(the card ``augdag_classifier.json`` and the weights); ``classification_scores`` (``scores``) gives
accuracy and macro-F1. Models load offline (``conf.offline``): a local directory, else a name already
in the Hugging Face cache.
"""

from __future__ import annotations

from models.classifier.bag import BagClassifier, hashed_ngrams
from models.classifier.base import CARD, TextClassifier
from models.classifier.build import KINDS, build_classifier, load_classifier
from models.classifier.hf import HFClassifier
from models.classifier.scores import classification_scores
from models.classifier.sentence_embedding import SentenceEmbeddingClassifier

__all__ = [
    "CARD",
    "KINDS",
    "BagClassifier",
    "HFClassifier",
    "SentenceEmbeddingClassifier",
    "TextClassifier",
    "build_classifier",
    "classification_scores",
    "hashed_ngrams",
    "load_classifier",
]
