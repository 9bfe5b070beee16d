"""``train_tagger``: train a slot tagger on BIO-tagged sentences, keeping the epoch with the best dev span F1.

    for epoch 1…E: shuffle (numpy Generator(seed)); per batch: loss, backward, clip ‖∇‖ ≤ clip, step
                   dev F1 (conlleval, ``span_f1``) with ``SlotTagger.predict``; keep the parameters if it is
                   strictly the best so far (ties: the earlier epoch)
    finally: the kept parameters (the last epoch's without dev) are written to ``out``

The paper's protocol (C2C-GenDA, Hou et al., AAAI 2021): test F1 at the best dev F1. Hand-written here: the batching
(shuffled, ``batch_size`` sentences) and the loop above; from torch: Adam (``bilstm``) / AdamW (``hf``),
``clip_grad_norm_``. Deterministic for a seed, whatever trains beside it in the process: the initialisation
and each step's dropout draw from torch's global generators seeded with (seed, step) inside
``models.runtime.seeded`` (the process-wide lock that owns them, one step at a time, the caller's state given
back), and the batch order and word dropout come from ``numpy.random.default_rng(seed)``; on a GPU, cuDNN may
still reorder sums.

The vocabulary (``bilstm``: every training word, plus ``<pad>`` and ``<unk>``) and the tag set (``O`` and
every training tag) come from ``train`` alone. Sentences without tokens are skipped in training.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conf.errors import InputError
from models.nmt.base import pick_device
from models.runtime import seeded, step_seed, torch_threads
from models.tagger.bilstm import BiLSTMBackend
from models.tagger.hf import HFBackend
from models.tagger.metrics import span_f1
from models.tagger.settings import TaggerSettings, tag_set, vocabulary
from models.tagger.tagger import SlotTagger, check_sentences

Tagged = Sequence[tuple[Sequence[str], Sequence[str]]]  # (tokens, BIO tags) per sentence


def split_rows(rows: Tagged, what: str) -> tuple[list[list[str]], list[list[str]]]:
    """(token lists, tag lists); a row whose tags do not match its tokens one to one is an InputError."""
    sentences = check_sentences([r[0] for r in rows], what)
    tags = check_sentences([r[1] for r in rows], what)
    for i, (s, t) in enumerate(zip(sentences, tags)):
        if len(s) != len(t):
            raise InputError(f"{what}: row {i}: {len(s)} tokens but {len(t)} tags; expected one BIO tag per token")
    return sentences, tags


def train_tagger(
    train: Tagged,
    out: Path,
    settings: TaggerSettings = TaggerSettings(),  # noqa: B008 — frozen
    *,
    dev: Tagged | None = None,
    device: str = "auto",
    threads: int = 0,
) -> dict[str, Any]:
    """Train on ``train`` ((tokens, tags) pairs), write the tagger into the directory ``out`` (created if
    needed; the caller renames it into place) and return ``{"epochs", "best_epoch", "dev_f1", "losses",
    "seconds"}``: ``dev_f1`` and ``losses`` (mean batch loss) one per epoch, ``dev_f1`` empty without dev,
    ``best_epoch`` 1-based (the last without dev)."""
    started = time.perf_counter()
    sentences, tags = split_rows(train, "train")
    keep = [i for i, s in enumerate(sentences) if s]
    if not keep:
        raise InputError("train: no sentence with tokens; expected (tokens, tags) pairs")
    sentences, tags = [sentences[i] for i in keep], [tags[i] for i in keep]
    dev_sentences, dev_tags = split_rows(dev, "dev") if dev is not None else ([], [])
    tagset = tag_set(tags)
    tag_index = {t: i for i, t in enumerate(tagset)}
    tag_ids = [[tag_index[t] for t in row] for row in tags]
    device = pick_device(device)
    if device == "cpu":
        torch_threads(threads)
    rng = np.random.default_rng(settings.seed)
    with seeded(step_seed(settings.seed, 0), device):  # the initialisation (and a pretrained encoder's load)
        if settings.kind == "bilstm":
            vocab, singletons = vocabulary(sentences, settings)
            backend = BiLSTMBackend(settings, vocab, tagset, device, singletons=singletons)
            optimizer = torch.optim.Adam(backend.module.parameters(), lr=settings.learning_rate)
        else:
            backend = HFBackend.start(settings, tagset, device)
            optimizer = torch.optim.AdamW(backend.module.parameters(), lr=settings.learning_rate)
    tagger = SlotTagger(backend)
    losses, dev_f1, best, best_state, step = [], [], -1.0, None, 0
    for _ in range(settings.epochs):
        backend.module.train()
        batch_losses = []
        order = rng.permutation(len(sentences))
        for start in range(0, len(order), settings.batch_size):
            batch = order[start : start + settings.batch_size]
            step += 1
            with seeded(step_seed(settings.seed, 1, step), device):  # this step's dropout, and only this step's
                optimizer.zero_grad()
                loss = backend.loss([sentences[i] for i in batch], [tag_ids[i] for i in batch], rng)
                loss.backward()
                if settings.clip > 0:
                    torch.nn.utils.clip_grad_norm_(backend.module.parameters(), settings.clip)
                optimizer.step()
            batch_losses.append(float(loss.detach()))
        losses.append(float(np.mean(batch_losses)))
        if dev is not None:
            dev_f1.append(span_f1(dev_tags, tagger.predict(dev_sentences, batch_size=settings.batch_size)))
            if dev_f1[-1] > best:
                best = dev_f1[-1]
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in backend.module.state_dict().items()}
    if best_state is not None:
        backend.module.load_state_dict(best_state)
    best_epoch = int(np.argmax(dev_f1)) + 1 if dev_f1 else settings.epochs  # argmax: the first of equal maxima
    record = {"epochs": settings.epochs, "best_epoch": best_epoch, "dev_f1": dev_f1, "losses": losses}
    tagger.trained = {**record, "train_rows": len(sentences)}
    tagger.save(out)
    return {**record, "seconds": time.perf_counter() - started}
