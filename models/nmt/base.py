"""The one interface of every NMT backend (fairseq, transformers, CTranslate2), and what they share.

A backend loads a model from a local directory (or, for transformers, a Hugging Face name) and offers:

- ``score(src, tgt)``: teacher-forced natural-log probabilities of every target token, EOS included,
  one float32 array per pair; ``None`` for a pair the model cannot score (empty after subwords, or
  longer than the model's positions). Scoring never drops a pair silently: the caller lists them.
- ``translate(src, options, progress=)``: beam search or sampling, detokenised strings in input order; a
  hypothesis has at most ``max_len_a · |source subwords| + max_len_b`` tokens (fairseq's bound; the longest
  source of its length batch counts, so an upper-cased or garbled input stops there, not at the model's
  positions), and ``progress(sentences done)`` is called after every batch (it may raise to stop the call).

Both run in batches of sentences sorted by length (``length_batches``), on the device ``pick_device``
chooses (CUDA when present, else CPU threads), so every backend runs on a GPU without code changes.

A model directory the project writes carries ``augdag_nmt.json`` (``ModelCard``): the backend, the
subword model, the language sides and, for fairseq checkpoints augdag trained, the checkpoint's sha256,
which is what makes it trusted (see ``models.nmt.fairseq``).
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from storage.artifacts import hash_inputs

CARD = "augdag_nmt.json"
Progress = Callable[[int], None]  # sentences done so far; called between batches, it may raise to stop the call


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """How ``translate`` decodes. ``lenpen`` divides a hypothesis' score by length**lenpen (fairseq's,
    CTranslate2's and transformers' convention alike). ``sampling`` draws instead of searching: one
    sample per sentence, from the top ``topk`` tokens (0: all) within ``topp`` mass, at ``temperature``;
    with ``bottom_k`` the first ``bottom_k_steps`` tokens are drawn without the ``bottom_k`` most probable
    (PCC's bottom-k, Eq. 2; fairseq and transformers — CTranslate2 has no per-step hook for it)."""

    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.5  # a hypothesis has at most max_len_a · |source subwords| + max_len_b tokens
    max_len_b: int = 10
    sampling: bool = False
    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 0
    bottom_k: int = 0  # sampling: for the first `bottom_k_steps` tokens the `bottom_k` most probable are removed
    bottom_k_steps: int = 0  # and the rest renormalised before top-k/top-p (PCC Eq. 2; models.bottom_k)


@dataclasses.dataclass(frozen=True)
class ModelCard:
    """``augdag_nmt.json`` in a model directory augdag wrote: enough to load it without guessing."""

    backend: str  # fairseq | transformers | ctranslate2
    subwords: str | None = None  # a SentencePiece model file name in the directory, or None (HF tokenizer)
    checkpoint: str | None = None  # fairseq: the checkpoint file name
    checkpoint_sha256: str | None = None  # fairseq: set by augdag's own training, which makes it trusted
    converted_from: str | None = None  # ctranslate2: the backend of the source model
    source_fingerprint: str | None = None  # ctranslate2: the source model's fingerprint
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def write(self, directory: Path) -> None:
        (Path(directory) / CARD).write_text(json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, directory: Path) -> ModelCard | None:
        path = Path(directory) / CARD
        if not path.is_file():
            return None
        try:
            return cls(**json.loads(path.read_text()))
        except (ValueError, TypeError) as e:
            raise ModelError(f"{path}: not a valid model card ({e})") from e


class NMTModel(abc.ABC):
    """A loaded translation model. Subclasses set ``backend``, ``path``, ``device``."""

    backend: str
    path: Path | str
    device: str

    @abc.abstractmethod
    def score(self, src: Sequence[str], tgt: Sequence[str], *, max_tokens: int = 4096) -> list[np.ndarray | None]:
        """Per-token log-probabilities (natural log, float32) of each target given its source, EOS included."""

    @abc.abstractmethod
    def translate(
        self,
        src: Sequence[str],
        options: DecodeOptions = DecodeOptions(),  # noqa: B008 (frozen)
        *,
        max_tokens: int = 4096,
        progress: Progress | None = None,
    ) -> list[str]:
        """The translations of ``src``, in order; ``progress`` hears the sentences done after each batch."""

    def fingerprint(self) -> str:
        """A content hash of the model's files (weights, vocabulary, subword model)."""
        return hash_inputs([Path(self.path)])

    def describe(self) -> str:
        return f"{self.backend}:{self.path} on {self.device}"


def pick_device(device: str = "auto") -> str:
    """``auto``: "cuda" when torch sees a GPU, else "cpu". An explicit "cuda" without one is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("device 'cuda' was asked for, but torch sees no GPU. Hint: device: auto")
    if device not in ("cpu", "cuda"):
        raise ModelError(f"device {device!r}: expected auto, cpu or cuda")
    return device


def cpu_threads(threads: int = 0) -> int:
    """0: every core this process may use."""
    import os

    return threads or len(os.sched_getaffinity(0))


def length_batches(lengths: Sequence[int], *, max_tokens: int, max_sentences: int = 1024) -> list[np.ndarray]:
    """Indices grouped into batches of similar length: sorted by length (stable, so ties keep input
    order), each batch holding at most ``max_sentences`` and at most ``max_tokens`` padded tokens
    (longest × count). A sentence longer than ``max_tokens`` gets a batch of its own."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        longest = lengths[order[end - 1]]
        if end - start > 1 and (longest * (end - start) > max_tokens or end - start > max_sentences):
            batches.append(order[start : end - 1])
            start = end - 1
    if start < len(order):
        batches.append(order[start:])
    return batches


def sentence_score(logprobs: np.ndarray | Sequence[float] | None) -> float | None:
    """exp(mean token log-probability), EOS included: the length-normalised probability of a pair (ch. 5)."""
    if logprobs is None or len(logprobs) == 0:
        return None
    return math.exp(math.fsum(float(x) for x in logprobs) / len(logprobs))


def check_pairs(src: Sequence[str], tgt: Sequence[str]) -> None:
    if len(src) != len(tgt):
        raise ModelError(f"score: {len(src)} sources but {len(tgt)} targets; expected one target per source")
