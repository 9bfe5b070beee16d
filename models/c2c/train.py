"""Training of the C2C-GenDA generator on cluster pairs (the loop and the loss are hand-written; the optimiser,
the clipping and the LM are torch's and transformers').

    Loss = mean NLL of the target tokens (each target's final <|eos|> included)
           + γ · R_diverse / (number of (i, j, t) terms)                       (Hou et al., AAAI 2021; attention.py)

One step is one cluster: all its targets, in rank order, are one batch sharing the prefix (the authors' "one
cluster per batch"). AdamW (weight decay 0.01 on the weight matrices, none on biases and layer-norm gains,
as the authors exclude biases), gradient norm clipped at 1, no warm-up, the rate decaying
linearly to 0 over ``epochs`` passes; the clusters' order in each epoch from a numpy Generator seeded with
``settings.seed``, the initialisation and each step's dropout from torch's global generators seeded with
(seed, step) inside ``models.runtime.seeded`` (the process-wide lock that owns them, held one step at a time):
the same pairs and settings give the same losses and weights on the same device, whatever trains beside them
in the process.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from conf.errors import ModelError
from models.c2c.attention import diverse_regulariser, diverse_terms
from models.c2c.model import C2CModel, C2CSettings, new_model
from models.c2c.serialise import Cluster, ClusterBatch, check_utterance, cluster_batch, encode
from models.nmt.base import pick_device
from models.runtime import seeded, step_seed, torch_threads

Pair = tuple[Cluster, Cluster]


def check_pairs(pairs: Sequence[Pair], max_outputs: int) -> list[tuple[list[list[str]], list[list[str]]]]:
    """The pairs as lists, each token checked; an output cluster has 1 … ``max_outputs`` utterances."""
    if not pairs:
        raise ModelError("train_c2c: no cluster pairs to train on; expected at least one (input, output) pair")
    out = []
    for k, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ModelError(f"pairs[{k}]: expected (input_cluster, output_cluster), found {len(pair)} items")
        inputs, outputs = pair
        if not 1 <= len(outputs) <= max_outputs:
            raise ModelError(
                f"pairs[{k}]: {len(outputs)} output utterances; expected 1 … {max_outputs} "
                f"(one rank token each). Hint: C2CSettings(max_outputs=...)"
            )
        for side, cluster in (("input", inputs), ("output", outputs)):
            for i, utterance in enumerate(cluster):
                check_utterance(utterance, f"pairs[{k}] {side} utterance {i}")
        out.append(([list(u) for u in inputs], [list(u) for u in outputs]))
    return out


def cluster_loss(model: C2CModel, batch: dict[str, Any], gamma: float) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, mean NLL, R_diverse / terms) of one cluster's batch (tensors from ``to_tensors``)."""
    labels, mask = batch["labels"], batch["mask"]
    logits = model.window_logits(batch["input_ids"], batch["attention_mask"], batch["start"], mask)
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0][mask].mean()
    terms = diverse_terms(mask)
    reg = diverse_regulariser(log_probs, mask, detach_other=True) / terms if terms else nll.new_zeros(())
    return nll + gamma * reg, nll, reg


def to_tensors(batch: ClusterBatch, device: str) -> dict[str, Any]:
    labels = torch.tensor(batch.labels, device=device)
    return {
        "input_ids": torch.tensor(batch.input_ids, device=device),
        "attention_mask": torch.tensor(batch.attention_mask, device=device),
        "labels": labels,
        "mask": labels != -100,
        "start": batch.start,
    }


def train_c2c(
    pairs: Sequence[Pair],
    out: Path,
    *,
    settings: C2CSettings = C2CSettings(),  # noqa: B008 — frozen
    device: str = "auto",
    threads: int = 0,
) -> dict[str, Any]:
    """Train a C2C generator on ``pairs`` and save it to ``out`` (written directly; the caller hands a
    temporary directory and renames it).

    Args:
        pairs: (input_cluster, output_cluster) pairs; a cluster is a list of utterances, an utterance a list of
            delexicalised word tokens; the output cluster in rank order (its first utterance gets ``<#0>``).
        out: the directory to write (``C2CGenerator.load`` reads it).
        settings: sizes, λ, γ, the optimiser's settings, the seed, and ``init`` (a local checkpoint) or None.
        device: auto, cpu or cuda (``models.nmt.base.pick_device``).
        threads: CPU threads for torch (0: every core this process may use).

    Returns:
        {"losses": per-epoch mean loss, "nll": per-epoch mean NLL, "reg": per-epoch mean R_diverse / terms,
        "steps": optimiser steps, "seconds": wall time}.
    """
    t0 = time.monotonic()
    device = pick_device(device)
    if device == "cpu":
        torch_threads(threads)
    checked = check_pairs(pairs, settings.max_outputs)
    with seeded(step_seed(settings.seed, 0), device):
        model = new_model(settings, [u for inputs, outputs in checked for u in (*inputs, *outputs)]).to(device)
    batches = encode_pairs(model, checked, device)

    lr = settings.learning_rate
    matrices = [p for p in model.parameters() if p.ndim >= 2]  # no decay on biases and layer-norm gains
    optimiser = torch.optim.AdamW(
        [
            {"params": matrices, "weight_decay": settings.weight_decay},
            {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=lr,
    )
    total = settings.epochs * len(batches)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: max(0.0, 1.0 - step / total))
    rng = np.random.default_rng(settings.seed)
    losses, nlls, regs, steps = [], [], [], 0
    model.train()
    for _ in range(settings.epochs):
        sums = np.zeros(3)
        for k in rng.permutation(len(batches)):
            steps += 1
            with seeded(step_seed(settings.seed, 1, steps), device):  # this step's dropout, and only this step's
                loss, nll, reg = cluster_loss(model, batches[k], settings.gamma)
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                if settings.clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
                optimiser.step()
            schedule.step()
            sums += [loss.item(), nll.item(), reg.item()]
        losses.append(float(sums[0]) / len(batches))
        nlls.append(float(sums[1]) / len(batches))
        regs.append(float(sums[2]) / len(batches))
    model.eval()
    result = {"losses": losses, "nll": nlls, "reg": regs, "steps": steps}
    model.save(
        Path(out),
        {"settings": dataclasses.asdict(settings), "gamma": settings.gamma, "lr": lr, "pairs": len(checked), "training": result},
    )
    return {**result, "seconds": time.monotonic() - t0}


def encode_pairs(model: C2CModel, pairs: list[tuple[list[list[str]], list[list[str]]]], device: str) -> list[dict[str, Any]]:
    """Each pair serialised (``serialise.cluster_batch``) as tensors on ``device``; each utterance encoded once."""
    cache: dict[tuple[str, ...], list[int]] = {}

    def ids(utterance: list[str]) -> list[int]:
        key = tuple(utterance)
        if key not in cache:
            cache[key] = encode(model.tokenizer, utterance)
        return cache[key]

    return [
        to_tensors(
            cluster_batch([ids(u) for u in inputs], [ids(u) for u in outputs], model.specials, model.max_length, f"pairs[{k}]"),
            device,
        )
        for k, (inputs, outputs) in enumerate(pairs)
    ]
