"""Text classifiers trained step by step on the batches a caller hands them (the paraphrase curriculum).

Three kinds behind one interface (``TextClassifier``: ``train_step``, ``predict``, ``save``):

- ``builtin``: hand-written here, a fastText-style bag of hashed n-grams. No maintained package offers
  a torch fastText that takes one optimiser step on a given batch (fastText itself trains a whole file
  in one call), so the model is ~60 lines: lowercased whitespace tokens, word n-grams up to ``ngrams``
  (default 2: unigrams and bigrams) hashed with ``zlib.crc32`` (stable across processes, unlike
  Python's salted ``hash``) into ``buckets`` rows of an ``EmbeddingBag(mode="mean")``, dropout, one
  linear layer. The bag has sparse gradients, updated by ``SparseAdam`` (only the rows a batch touches,
  as fastText does); the linear layer by ``Adam``.
- ``sentence_embedding``: a thin wrapper, a frozen ``sentence_transformers.SentenceTransformer`` encoder
  (a name or a local path) and a trained head (linear, or one hidden ReLU layer with ``hidden``). A
  text is encoded once and its embedding memoised in the object: few-shot training repeats the same
  texts over hundreds of steps.
- ``hf``: a thin wrapper, a Hugging Face ``AutoModelForSequenceClassification`` fine-tuned whole with
  ``AdamW`` (a new classification head for ``len(labels)`` classes, ``ignore_mismatched_sizes``).

Every kind is deterministic for a ``seed``: the initialisation and the dropout of step ``k`` draw from
torch's generators seeded by (seed, k) inside ``torch.random.fork_rng``, so the global generators are
left as they were. ``train_step`` returns the batch's mean cross-entropy before the step.

``save(dir)`` writes ``augdag_classifier.json`` (the card: kind, labels, model, hyper-parameters, steps
taken) and the weights; ``load_classifier(dir)`` reads it back. The optimiser state is not saved: a
loaded classifier predicts exactly as the saved one, and training it again starts fresh moments.
A ``sentence_embedding`` card names its encoder (an absolute path when it was a local directory); the
encoder itself is not copied. Models load offline (``conf.offline``): a local directory, else a name
already in the Hugging Face cache.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
import math
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from conf.errors import ModelError
from models.nmt.base import cpu_threads, pick_device

CARD = "augdag_classifier.json"
WEIGHTS = "model.safetensors"  # builtin: the whole model; sentence_embedding: the head
CARD_FORMAT = 1

__all__ = ["CARD", "KINDS", "TextClassifier", "BagClassifier", "SentenceEmbeddingClassifier", "HFClassifier",
           "build_classifier", "load_classifier", "classification_scores", "hashed_ngrams"]


@dataclasses.dataclass(frozen=True)
class KindSpec:
    """What a kind needs: a ``model`` or not, its default learning rate and its options with their defaults."""

    needs_model: bool
    lr: float
    options: dict[str, Any]


KINDS: dict[str, KindSpec] = {
    "builtin": KindSpec(needs_model=False, lr=1e-2,
                        options={"buckets": 2 ** 18, "dim": 64, "dropout": 0.1, "ngrams": 2}),
    "sentence_embedding": KindSpec(needs_model=True, lr=1e-2,
                                   options={"hidden": 0, "dropout": 0.1, "encode_batch_size": 64}),
    "hf": KindSpec(needs_model=True, lr=5e-5, options={"max_length": 128}),
}
_LIMITS = {  # option: (smallest, largest) allowed, both inclusive; dropout below 1
    "buckets": (1, None), "dim": (1, None), "ngrams": (1, None), "hidden": (0, None),
    "encode_batch_size": (1, None), "max_length": (2, None), "dropout": (0.0, 1.0),
}


def _kinds_hint() -> str:
    return "; ".join(f"{k} ({'needs model' if s.needs_model else 'no model'}; options: "
                     f"{', '.join(f'{o}={v!r}' for o, v in s.options.items())}; lr={s.lr:g})"
                     for k, s in KINDS.items())


def _check_options(kind: str, given: dict[str, Any]) -> dict[str, Any]:
    """The options of ``kind``: its defaults updated with ``given``, each checked for type and range."""
    spec = KINDS[kind]
    unknown = sorted(set(given) - set(spec.options))
    if unknown:
        raise ModelError(f"classifier {kind}: unknown option(s) {', '.join(map(repr, unknown))}; options of "
                         f"{kind}: {', '.join(f'{o}={v!r}' for o, v in spec.options.items())}")
    options = dict(spec.options)
    for name, value in given.items():
        want = type(spec.options[name])
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if want is int and ok and float(value).is_integer():
            value = int(value)
        elif want is float and ok:
            value = float(value)
        else:
            raise ModelError(f"classifier {kind}: option {name}={value!r}; expected {want.__name__}")
        low, high = _LIMITS.get(name, (None, None))
        if (low is not None and value < low) or (high is not None and value >= high):
            bound = f"in [{low}, {high})" if high is not None else f">= {low}"
            raise ModelError(f"classifier {kind}: option {name}={value!r}; expected {bound}")
        options[name] = value
    return options


def _seed_for(seed: int, *stream: int) -> int:
    """A 64-bit torch seed for (seed, stream…), independent of Python's hash salt."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(1, np.uint64)[0])


@contextlib.contextmanager
def _seeded(seed: int, device: str) -> Iterator[None]:
    """torch's generators (CPU, and CUDA when ``device`` is cuda) seeded for a block, restored after it."""
    devices = list(range(torch.cuda.device_count())) if device == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _setup_device(device: str, threads: int) -> str:
    device = pick_device(device)
    if device == "cpu":
        torch.set_num_threads(cpu_threads(threads))
    return device


class TextClassifier(abc.ABC):
    """A classifier into ``labels`` (index i = ``labels[i]``), trained one batch at a time.

    Subclasses set ``kind`` and implement ``_logits`` (a batch of texts → float logits on ``device``),
    ``_save_weights`` and the ``_module``/``_optimizers`` they train.
    """

    kind: str
    labels: list[str]
    device: str

    def __init__(self, labels: Sequence[str], *, model: str | None, lr: float, seed: int, options: dict[str, Any],
                 device: str):
        self.labels, self.model, self.lr, self.seed = list(labels), model, lr, seed
        self.options, self.device = options, device
        self.steps = 0  # train_step calls so far (saved in the card, so training goes on with the same stream)
        self._module: nn.Module
        self._optimizers: list[torch.optim.Optimizer]

    # -- what a kind provides
    @abc.abstractmethod
    def _logits(self, texts: list[str]) -> torch.Tensor:
        """(len(texts), len(labels)) logits, in the module's current mode (train or eval)."""

    @abc.abstractmethod
    def _save_weights(self, path: Path) -> None:
        """Write the weights into the directory ``path``."""

    # -- the interface
    def train_step(self, texts: Sequence[str], labels: Sequence[int]) -> float:
        """One optimiser step on this batch; returns its mean cross-entropy (nats, before the step)."""
        texts = list(texts)
        target = self._targets(texts, labels)
        self._module.train()
        with _seeded(_seed_for(self.seed, 1, self.steps), self.device):
            loss = F.cross_entropy(self._logits(texts).float(), target)
            for optimizer in self._optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for optimizer in self._optimizers:
                optimizer.step()
        self.steps += 1
        value = loss.item()
        if not math.isfinite(value):
            raise ModelError(f"classifier {self.describe()}: the loss is {value} at step {self.steps}. "
                             f"Hint: a smaller lr (now {self.lr:g})")
        return value

    def predict(self, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
        """The most likely label index of every text (int64, input order), in eval mode without gradients.

        Texts run in batches of ``batch_size`` sorted by length (less padding); the order does not change
        a prediction."""
        texts = list(texts)
        if batch_size < 1:
            raise ModelError(f"predict: batch_size={batch_size}; expected >= 1")
        out = np.empty(len(texts), dtype=np.int64)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        self._module.eval()
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                out[rows] = self._logits([texts[i] for i in rows]).argmax(-1).cpu().numpy()
        return out

    def save(self, path: Path) -> None:
        """Write the weights and the card ``augdag_classifier.json`` (last) into the directory ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._save_weights(path)
        card = {"format": CARD_FORMAT, "kind": self.kind, "labels": self.labels, "model": self.model,
                "hyper": {"lr": self.lr, "seed": self.seed, **self.options}, "steps": self.steps}
        (path / CARD).write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")

    def describe(self) -> str:
        return f"{self.kind}{':' + self.model if self.model else ''} on {self.device}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()} labels={self.labels} steps={self.steps}>"

    def _targets(self, texts: list[str], labels: Sequence[int]) -> torch.Tensor:
        target = np.asarray(labels)
        if len(texts) != len(target):
            raise ModelError(f"train_step: {len(texts)} texts but {len(target)} labels; expected one label per text")
        if not len(texts):
            raise ModelError("train_step: an empty batch; expected at least one text")
        if target.dtype.kind not in "iu" or target.min() < 0 or target.max() >= len(self.labels):
            raise ModelError(f"train_step: labels must be integer indices in [0, {len(self.labels)}) into "
                             f"{self.labels}; found {sorted(set(target.tolist()))[:10]}")
        return torch.as_tensor(target, dtype=torch.long, device=self.device)


# ----------------------------------------------------------------------------------------------- builtin
def hashed_ngrams(text: str, *, buckets: int, ngrams: int = 2) -> list[int]:
    """The bucket ids of a text's lowercased whitespace-token n-grams, n = 1..``ngrams`` (crc32 of the
    space-joined n-gram's UTF-8, modulo ``buckets``). An empty text has none."""
    tokens = text.lower().split()
    return [zlib.crc32(" ".join(tokens[i:i + n]).encode()) % buckets
            for n in range(1, ngrams + 1) for i in range(len(tokens) - n + 1)]


class _Bag(nn.Module):
    def __init__(self, buckets: int, dim: int, n_labels: int, dropout: float):
        super().__init__()
        self.embedding = nn.EmbeddingBag(buckets, dim, mode="mean", sparse=True)
        nn.init.uniform_(self.embedding.weight, -1.0 / dim, 1.0 / dim)  # fastText's initialisation
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(dim, n_labels)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(self.embedding(ids, offsets)))


class BagClassifier(TextClassifier):
    """``builtin``: hashed unigram+bigram bag → mean embedding → dropout → linear (see the module doc)."""

    kind = "builtin"

    def __init__(self, labels, *, model=None, lr, seed, options, device):
        super().__init__(labels, model=None, lr=lr, seed=seed, options=options, device=device)
        with _seeded(_seed_for(seed, 0), "cpu"):
            self._module = _Bag(options["buckets"], options["dim"], len(self.labels), options["dropout"])
        self._module.to(device)
        self._optimizers = [torch.optim.SparseAdam(list(self._module.embedding.parameters()), lr=lr),
                            torch.optim.Adam(list(self._module.linear.parameters()), lr=lr)]

    def _logits(self, texts: list[str]) -> torch.Tensor:
        bags = [hashed_ngrams(t, buckets=self.options["buckets"], ngrams=self.options["ngrams"]) for t in texts]
        offsets = np.cumsum([0] + [len(b) for b in bags[:-1]])
        ids = torch.tensor([i for b in bags for i in b], dtype=torch.long, device=self.device)
        return self._module(ids, torch.as_tensor(offsets, dtype=torch.long, device=self.device))

    def _save_weights(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in self._module.state_dict().items()},
                  str(path / WEIGHTS))

    def _load_weights(self, path: Path) -> None:
        _load_state(self._module, path / WEIGHTS, self.device)


def _load_state(module: nn.Module, file: Path, device: str) -> None:
    from safetensors.torch import load_file

    try:
        state = load_file(str(file), device=device)
        module.load_state_dict(state)
    except (OSError, RuntimeError, ValueError) as e:
        raise ModelError(f"{file}: weights do not load into the model its card describes ({e}). "
                         "Hint: the directory was changed after TextClassifier.save; save it again") from e


# ------------------------------------------------------------------------------------ sentence_embedding
class SentenceEmbeddingClassifier(TextClassifier):
    """``sentence_embedding``: a frozen SentenceTransformer encoder and a trained head."""

    kind = "sentence_embedding"

    def __init__(self, labels, *, model, lr, seed, options, device):
        from sentence_transformers import SentenceTransformer

        local = Path(model).expanduser()
        model = str(local.resolve()) if local.is_dir() else str(model)
        super().__init__(labels, model=model, lr=lr, seed=seed, options=options, device=device)
        try:
            encoder = SentenceTransformer(model, device=device)
        except (OSError, ValueError) as e:
            raise ModelError(f"{model}: no sentence-transformers model found, looked up by this name or path "
                             f"(local directory, else the Hugging Face cache): {e}. Hint: pass a local directory "
                             "written by SentenceTransformer.save, or copy a cached download here") from e
        self.encoder = encoder.eval().requires_grad_(False)
        dim = self.encoder.get_embedding_dimension()
        if not dim:
            raise ModelError(f"{model}: the encoder does not say its embedding dimension; expected a "
                             "SentenceTransformer ending in a pooling layer")
        hidden, p = options["hidden"], options["dropout"]
        with _seeded(_seed_for(seed, 0), "cpu"):
            if hidden:
                head = nn.Sequential(nn.Dropout(p), nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(p),
                                     nn.Linear(hidden, len(self.labels)))
            else:
                head = nn.Sequential(nn.Dropout(p), nn.Linear(dim, len(self.labels)))
        self._module = self.head = head.to(device)
        self._optimizers = [torch.optim.Adam(self.head.parameters(), lr=lr)]
        self.memo: dict[str, torch.Tensor] = {}  # text → its embedding on device

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """The encoder's embeddings of ``texts`` (float32, on device), each distinct text encoded once."""
        missing = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if missing:
            encoded = self.encoder.encode(missing, batch_size=self.options["encode_batch_size"],
                                          convert_to_tensor=True, show_progress_bar=False)
            encoded = encoded.float().clone()  # out of inference mode: the head's backward saves its input
            for text, row in zip(missing, encoded):
                self.memo[text] = row
        return torch.stack([self.memo[t] for t in texts])

    def _logits(self, texts: list[str]) -> torch.Tensor:
        return self.head(self.embed(texts))

    def _save_weights(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}, str(path / WEIGHTS))

    def _load_weights(self, path: Path) -> None:
        _load_state(self.head, path / WEIGHTS, self.device)


# -------------------------------------------------------------------------------------------------- hf
class HFClassifier(TextClassifier):
    """``hf``: a fine-tuned ``AutoModelForSequenceClassification`` and its tokenizer."""

    kind = "hf"

    def __init__(self, labels, *, model, lr, seed, options, device, weights_from: str | Path | None = None):
        """``weights_from``: a directory this class saved (load); None: start from ``model`` with a new head."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        super().__init__(labels, model=str(model), lr=lr, seed=seed, options=options, device=device)
        source = str(weights_from if weights_from is not None else model)
        id2label = dict(enumerate(self.labels))
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            with _seeded(_seed_for(seed, 0), "cpu"):
                if weights_from is None:
                    net = AutoModelForSequenceClassification.from_pretrained(
                        source, num_labels=len(self.labels), id2label=id2label,
                        label2id={v: k for k, v in id2label.items()}, ignore_mismatched_sizes=True)
                else:
                    net = AutoModelForSequenceClassification.from_pretrained(source)
        except (OSError, ValueError) as e:
            raise ModelError(f"{source}: no Hugging Face sequence-classification model with its tokenizer found, "
                             f"looked up by this name or path (local directory, else the Hugging Face cache): "
                             f"{e}. Hint: pass a directory written by save_pretrained (model and tokenizer), "
                             "or copy a cached download here") from e
        if weights_from is not None and [net.config.id2label.get(i) for i in range(len(self.labels))] != self.labels:
            raise ModelError(f"{source}: config.json labels {net.config.id2label} differ from the card's "
                             f"{self.labels}. Hint: the directory was changed after TextClassifier.save")
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise ModelError(f"{source}: its tokenizer has neither a pad nor an eos token to pad batches "
                                 "with. Hint: set tokenizer.pad_token and save it with the model")
            tokenizer.pad_token = tokenizer.eos_token
        if net.config.pad_token_id is None:
            net.config.pad_token_id = tokenizer.pad_token_id
        self.tokenizer, self.net = tokenizer, net.to(device)
        self._module = self.net
        self._optimizers = [torch.optim.AdamW(self.net.parameters(), lr=lr)]

    def _logits(self, texts: list[str]) -> torch.Tensor:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.options["max_length"],
                             return_tensors="pt").to(self.device)
        return self.net(**enc).logits

    def _save_weights(self, path: Path) -> None:
        self.net.save_pretrained(path)
        self.tokenizer.save_pretrained(path)


_CLASSES: dict[str, type[TextClassifier]] = {
    "builtin": BagClassifier, "sentence_embedding": SentenceEmbeddingClassifier, "hf": HFClassifier}


# ------------------------------------------------------------------------------------------ build / load
def build_classifier(kind: str, labels: Sequence[str], *, model: str | None = None, lr: float | None = None,
                     seed: int = 0, device: str = "auto", threads: int = 0, **options: Any) -> TextClassifier:
    """A new classifier of ``kind`` into ``labels``.

    Args:
        kind: builtin | sentence_embedding | hf (``KINDS``).
        labels: the class names, index i = ``labels[i]``; at least two, distinct.
        model: sentence_embedding: the encoder (name or local path); hf: the model to fine-tune; builtin: None.
        lr: the learning rate (None: the kind's default, ``KINDS[kind].lr``).
        seed: the initialisation and dropout stream (same seed, same batches → the same losses).
        device: auto, cpu or cuda (``pick_device``).
        threads: CPU threads for torch (0: every core this process may use).
        options: the kind's options (``KINDS[kind].options``).
    """
    if kind not in KINDS:
        raise ModelError(f"classifier kind {kind!r} unknown; kinds: {_kinds_hint()}")
    spec = KINDS[kind]
    if spec.needs_model and not model:
        raise ModelError(f"classifier {kind} needs a model (a name or a local directory); none given. "
                         f"Kinds: {_kinds_hint()}")
    if not spec.needs_model and model:
        raise ModelError(f"classifier {kind} takes no model; {model!r} given. Kinds: {_kinds_hint()}")
    labels = list(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels) or not all(isinstance(x, str) and x for x in labels):
        raise ModelError(f"classifier {kind}: labels {labels[:20]}; expected two or more distinct non-empty names")
    lr = spec.lr if lr is None else float(lr)
    if not (lr > 0 and math.isfinite(lr)):
        raise ModelError(f"classifier {kind}: lr={lr!r}; expected a positive number")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ModelError(f"classifier {kind}: seed={seed!r}; expected an integer >= 0")
    options = _check_options(kind, options)
    device = _setup_device(device, threads)
    return _CLASSES[kind](labels, model=model, lr=lr, seed=int(seed), options=options, device=device)


def load_classifier(path: Path, *, device: str = "auto", threads: int = 0) -> TextClassifier:
    """The classifier ``TextClassifier.save`` wrote to ``path``, as the card ``augdag_classifier.json`` describes."""
    path = Path(path)
    card_file = path / CARD
    if not card_file.is_file():
        raise ModelError(f"{path}: no {CARD}; expected a directory written by TextClassifier.save")
    try:
        card = json.loads(card_file.read_text())
        kind, labels, model, hyper = card["kind"], card["labels"], card["model"], dict(card["hyper"])
        steps = int(card.get("steps", 0))
        lr, seed = float(hyper.pop("lr")), int(hyper.pop("seed"))
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{card_file}: not a valid classifier card ({type(e).__name__}: {e})") from e
    if card.get("format") != CARD_FORMAT:
        raise ModelError(f"{card_file}: card format {card.get('format')!r}; this augdag reads {CARD_FORMAT}")
    if kind not in KINDS:
        raise ModelError(f"{card_file}: classifier kind {kind!r} unknown; kinds: {', '.join(KINDS)}")
    options = _check_options(kind, hyper)
    device = _setup_device(device, threads)
    if kind == "hf":
        clf: TextClassifier = HFClassifier(labels, model=model, lr=lr, seed=seed, options=options, device=device,
                                           weights_from=path)
    else:
        clf = _CLASSES[kind](labels, model=model, lr=lr, seed=seed, options=options, device=device)
        clf._load_weights(path)  # type: ignore[attr-defined]
    clf.steps = steps
    return clf


# ------------------------------------------------------------------------------------------------ scores
def classification_scores(gold: Sequence[int], pred: Sequence[int], n_labels: int) -> dict[str, float]:
    """Accuracy and macro-F1 over all ``n_labels`` classes: a class neither present nor predicted counts
    as F1 0 (sklearn ``f1_score(average="macro", labels=range(n_labels), zero_division=0)``)."""
    from sklearn.metrics import accuracy_score, f1_score

    gold, pred = np.asarray(gold, dtype=np.int64), np.asarray(pred, dtype=np.int64)
    if gold.shape != pred.shape or gold.ndim != 1:
        raise ModelError(f"classification_scores: {gold.size} gold labels but {pred.size} predictions; "
                         "expected one prediction per gold label")
    if not len(gold):
        raise ModelError("classification_scores: no examples to score")
    outside = [int(x) for x in np.concatenate([gold, pred]) if not 0 <= x < n_labels]
    if outside:
        raise ModelError(f"classification_scores: label indices {sorted(set(outside))[:10]} outside "
                         f"[0, {n_labels})")
    return {"accuracy": float(accuracy_score(gold, pred)),
            "macro_f1": float(f1_score(gold, pred, average="macro", labels=list(range(n_labels)),
                                       zero_division=0))}
