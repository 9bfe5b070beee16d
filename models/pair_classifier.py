"""A Hugging Face sequence-pair classifier (``AutoModelForSequenceClassification``) loaded and run on pairs.

    logits(first, second) = model(tokenizer(first, second))          (float64, n × num_labels)

Shared by the NLI model of mutual implication (``models.nli``) and the cross-encoder similarity
(``models.similarity``), which must not import each other. A pair is tokenised as the tokenizer's sentence
pair, truncated to the model's length (``max_length``), and run in length-sorted batches
(``length_batches``) under ``torch.inference_mode()``, on the device ``pick_device`` chooses.

Loading is offline (``conf.offline``): a local directory, else a name already in the Hugging Face cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.nmt.base import length_batches, pick_device
from models.runtime import loading, torch_threads
from storage.artifacts import hash_inputs

OFFLINE_HINT = (
    "Hint: pass a local directory written by save_pretrained (model and tokenizer), or download "
    "the model on a connected machine and copy its Hugging Face cache here"
)


def load_pair_classifier(
    model: str | Path, *, device: str = "auto", threads: int = 0, what: str = "sequence-pair"
) -> tuple[Any, Any, str]:
    """``AutoModelForSequenceClassification`` and ``AutoTokenizer`` of ``model``, offline, in eval mode on
    the device ``pick_device`` chooses; CPU threads set to ``cpu_threads(threads)`` on the CPU."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    device = pick_device(device)
    if device == "cpu":
        torch_threads(threads)
    try:
        with loading():
            loaded = AutoModelForSequenceClassification.from_pretrained(str(model))
    except (OSError, ValueError) as e:
        raise ModelError(
            f"{model}: no {what} classifier (AutoModelForSequenceClassification) found, looked up "
            f"offline by this name or path (local directory, else the Hugging Face cache): {e}. "
            f"{OFFLINE_HINT}"
        ) from e
    try:
        with loading():
            tokenizer = AutoTokenizer.from_pretrained(str(model))
    except (OSError, ValueError) as e:
        raise ModelError(
            f"{model}: no Hugging Face tokenizer found, looked up offline (local directory, else the "
            f"Hugging Face cache): {e}. Hint: save the tokenizer with the model "
            "(tokenizer.save_pretrained)"
        ) from e
    return loaded.to(device).eval(), tokenizer, device


def max_length(config: Any, tokenizer: Any) -> int | None:
    """The longest input: the tokenizer's ``model_max_length`` where it is set, capped by the model's
    position embeddings (None: neither says)."""
    limits = [getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None)]
    limits = [n for n in limits if isinstance(n, int) and 0 < n < 1_000_000]
    return min(limits) if limits else None


def pair_logits(
    model: Any,
    tokenizer: Any,
    firsts: Sequence[str],
    seconds: Sequence[str],
    *,
    device: str,
    max_length: int | None,
    max_tokens: int = 4096,
    path: str | Path = "",
) -> np.ndarray:
    """The logits (float64, n × num_labels) of each (first, second) sentence pair, in input order.

    Pairs are tokenised by the tokenizer's pair template, truncated (longest side first) to ``max_length``,
    grouped by ``length_batches`` (at most ``max_tokens`` padded tokens a batch) and right-padded."""
    import torch

    if len(firsts) != len(seconds):
        raise ModelError(f"{path}: {len(firsts)} first sentences but {len(seconds)} second ones; expected pairs")
    out = np.zeros((len(firsts), model.config.num_labels), dtype=np.float64)
    if not len(firsts):
        return out
    truncate = {"truncation": True, "max_length": max_length} if max_length else {}
    encoded = tokenizer(list(firsts), list(seconds), **truncate)
    keys = [k for k in ("input_ids", "token_type_ids", "attention_mask") if k in encoded]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.config.pad_token_id
    if pad is None:
        raise ModelError(
            f"{path}: the tokenizer has no padding token and the model config no pad_token_id. "
            "Hint: set tokenizer.pad_token and save the tokenizer again"
        )
    ids = encoded["input_ids"]
    for batch in length_batches([len(x) for x in ids], max_tokens=max_tokens):
        width = max(len(ids[i]) for i in batch)
        inputs = {}
        for key in keys:
            fill = pad if key == "input_ids" else 0
            rows = [encoded[key][i] + [fill] * (width - len(encoded[key][i])) for i in batch]
            inputs[key] = torch.tensor(rows, dtype=torch.long, device=device)
        with torch.inference_mode():
            logits = model(**inputs).logits
        out[batch] = logits.float().cpu().numpy()
    return out


def model_fingerprint(model: str | Path) -> str:
    """``hash_inputs`` of a local model directory (or file); a Hugging Face name stands for itself."""
    path = Path(model)
    return hash_inputs([path]) if path.exists() else str(model)
