"""The interface every classifier kind implements: ``TextClassifier`` (``train_step``, ``predict``, ``save``).

Every kind is deterministic for a ``seed``: the initialisation and the dropout of step ``k`` draw from
torch's generators seeded by (seed, k) inside ``models.runtime.seeded`` (``seed_for``), which holds the
process-wide lock that owns the global generators for the step and restores them after it: a pipeline
training beside this one in another thread neither sees nor moves these draws. ``train_step`` returns the
batch's mean cross-entropy before the step.

``save(dir)`` writes the weights and then ``augdag_classifier.json`` (the card: kind, labels, model,
hyper-parameters, steps taken); ``models.classifier.build.load_classifier`` reads it back. The optimiser
state is not saved: a loaded classifier predicts exactly as the saved one, and training it again starts
fresh moments.
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from conf.errors import ModelError
from models.runtime import seeded

CARD = "augdag_classifier.json"
WEIGHTS = "model.safetensors"  # builtin: the whole model; sentence_embedding: the head
CARD_FORMAT = 1


def seed_for(seed: int, *stream: int) -> int:
    """A 64-bit torch seed for (seed, stream…), independent of Python's hash salt."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(1, np.uint64)[0])


class TextClassifier(abc.ABC):
    """A classifier into ``labels`` (index i = ``labels[i]``), trained one batch at a time.

    Subclasses set ``kind`` and implement ``_logits`` (a batch of texts → float logits on ``device``),
    ``_save_weights`` and the ``_module``/``_optimizers`` they train.
    """

    kind: str
    labels: list[str]
    device: str

    def __init__(self, labels: Sequence[str], *, model: str | None, lr: float, seed: int, options: dict[str, Any], device: str):
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
        with seeded(seed_for(self.seed, 1, self.steps), self.device):
            loss = F.cross_entropy(self._logits(texts).float(), target)
            for optimizer in self._optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for optimizer in self._optimizers:
                optimizer.step()
        self.steps += 1
        value = loss.item()
        if not math.isfinite(value):
            raise ModelError(
                f"classifier {self.describe()}: the loss is {value} at step {self.steps}. Hint: a smaller lr (now {self.lr:g})"
            )
        return value

    def predict(self, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
        """The most likely label index of every text (int64, input order), in eval mode without gradients.

        Texts run in batches of ``batch_size`` sorted by length (less padding); the order does not change
        a prediction."""
        return self._eval_batches(texts, batch_size, lambda logits: logits.argmax(-1), np.int64, ())

    def predict_proba(self, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
        """The distribution over ``labels`` of every text (float64, len(texts) × len(labels), rows sum to 1):
        the softmax of the logits, batched like ``predict`` (EPiDA's feedback p(t), p(x))."""
        return self._eval_batches(
            texts, batch_size, lambda logits: torch.softmax(logits.double(), -1), np.float64, (len(self.labels),)
        )

    def _eval_batches(self, texts: Sequence[str], batch_size: int, head: Any, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        texts = list(texts)
        if batch_size < 1:
            raise ModelError(f"predict: batch_size={batch_size}; expected >= 1")
        out = np.empty((len(texts), *shape), dtype=dtype)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        self._module.eval()
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                out[rows] = head(self._logits([texts[i] for i in rows])).cpu().numpy()
        return out

    def save(self, path: Path) -> None:
        """Write the weights and the card ``augdag_classifier.json`` (last) into the directory ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._save_weights(path)
        card = {
            "format": CARD_FORMAT,
            "kind": self.kind,
            "labels": self.labels,
            "model": self.model,
            "hyper": {"lr": self.lr, "seed": self.seed, **self.options},
            "steps": self.steps,
        }
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
            raise ModelError(
                f"train_step: labels must be integer indices in [0, {len(self.labels)}) into "
                f"{self.labels}; found {sorted(set(target.tolist()))[:10]}"
            )
        return torch.as_tensor(target, dtype=torch.long, device=self.device)


def save_state(module: nn.Module, file: Path) -> None:
    """A module's weights as one safetensors file (on the CPU, contiguous)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}, str(file))


def load_state(module: nn.Module, file: Path, device: str) -> None:
    """The weights ``save_state`` wrote, into ``module`` on ``device``."""
    from safetensors.torch import load_file

    try:
        state = load_file(str(file), device=device)
        module.load_state_dict(state)
    except (OSError, RuntimeError, ValueError) as e:
        raise ModelError(
            f"{file}: weights do not load into the model its card describes ({e}). "
            "Hint: the directory was changed after TextClassifier.save; save it again"
        ) from e
