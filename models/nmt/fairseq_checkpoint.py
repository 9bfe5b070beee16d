"""A fairseq model directory on disk: where its files are, and whether and how its checkpoint may be unpickled.

Loading is hand-written around one ``torch.load`` call, because fairseq's ``load_checkpoint_to_cpu``
calls ``torch.load`` without ``weights_only``, which torch ≥ 2.6 refuses for fairseq checkpoints
(``Unsupported global: GLOBAL argparse.Namespace``), and offers no way to pass an allow-list. The
checkpoint's bytes are read once, hashed, and unpickled from those same bytes:
a checkpoint augdag trained (the card's ``checkpoint_sha256`` matches) with ``weights_only=True`` and
``ALLOWED_GLOBALS`` inside ``torch.serialization.safe_globals`` (a context manager: nothing stays
allow-listed afterwards); a checkpoint the user's config marks ``trusted`` fully; anything else not at
all. The card is no proof of origin (anyone who can place a checkpoint can write a card beside it), which
is why augdag's own checkpoints still load with ``weights_only``. The state then goes to fairseq's
``load_model_ensemble_and_task(state=…)`` (``models.nmt.fairseq``) after the steps ``load_checkpoint_to_cpu``
applies (``fairseq_state``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conf.errors import ModelError
from models.nmt.base import CARD, ModelCard
from models.runtime import loading

CHECKPOINT = "checkpoint.pt"
SUBWORDS = "spm.model"
SUBWORD_NAMES = (SUBWORDS, "sentencepiece.bpe.model")  # looked for in a user's model directory
TRUST_HINT = (
    "augdag only loads fairseq checkpoints it trained itself (the directory's augdag_nmt.json "
    "carries the checkpoint's sha256) or that the config marks trusted. Hint: if you trust "
    "this file, set `trusted: true` in that model's config section (e.g. "
    "self_training.teacher.trusted), or pass trusted=True"
)


ALLOWED_GLOBALS = (argparse.Namespace,)
"""What a checkpoint augdag trained pickles besides tensors, numbers and containers: fairseq 0.12 stores its
command line (``cfg.model``) as an ``argparse.Namespace``. Found with ``torch.serialization.
get_unsafe_globals_in_checkpoint``; the tests check that it is still all."""


@dataclasses.dataclass(frozen=True)
class FairseqFiles:
    """Where a fairseq model's parts are: its directory, checkpoint, card and subword model."""

    directory: Path
    checkpoint: Path
    card: ModelCard | None
    subwords: Path | None


def locate(model: str | Path) -> FairseqFiles:
    """The files of a model directory (or of the directory around a checkpoint file)."""
    path = Path(model)
    if not path.exists():
        raise ModelError(f"{path}: no such fairseq model (expected a directory with a checkpoint, or a *.pt file)")
    directory = path.parent if path.is_file() else path
    card = ModelCard.read(directory)
    if path.is_file():
        checkpoint = path
    elif card is not None and card.checkpoint:
        checkpoint = directory / card.checkpoint
    else:
        checkpoint = _only_checkpoint(directory)
    if not checkpoint.is_file():
        raise ModelError(f"{checkpoint}: checkpoint named by {directory / CARD} is missing")
    names = ([card.subwords] if card is not None and card.subwords else []) + list(SUBWORD_NAMES)
    subwords = next((directory / n for n in names if (directory / n).is_file()), None)
    return FairseqFiles(directory, checkpoint, card, subwords)


def _only_checkpoint(directory: Path) -> Path:
    found = sorted(directory.glob("*.pt"))
    if len(found) != 1:
        what = "no *.pt checkpoint" if not found else f"{len(found)} checkpoints ({', '.join(p.name for p in found)})"
        raise ModelError(
            f"{directory}: {what}; expected one. Hint: name the file, e.g. model: "
            f"{directory / (found[0].name if found else 'checkpoint_best.pt')}"
        )
    return found[0]


def stamp(files: FairseqFiles) -> tuple[Any, ...]:
    """What invalidates a cached model: the checkpoint's or the card's file changing."""
    card = files.directory / CARD
    stats = [files.checkpoint.stat(), card.stat() if card.is_file() else None]
    return tuple((s.st_size, s.st_mtime_ns, s.st_ino) if s is not None else None for s in stats)


# -- trust ----------------------------------------------------------------------------------------------


def trust(files: FairseqFiles, sha256: str, trusted: bool) -> bool:
    """Whether the checkpoint may be unpickled, and how: True for weights_only with ``ALLOWED_GLOBALS`` (augdag
    trained it: the card's sha256 matches), False for full unpickling (the user trusts it); else raise."""
    card = files.card
    card_sha = card.checkpoint_sha256 if card is not None and card.checkpoint == files.checkpoint.name else None
    if card_sha is not None and card_sha == sha256:
        return True
    if trusted:
        return False
    why = (
        f"its sha256 {sha256[:16]}… differs from the {card_sha[:16]}… that {files.directory / CARD} records "
        "(the file was replaced or changed after augdag trained it)"
        if card_sha is not None
        else f"augdag did not train it (no checkpoint_sha256 in a {CARD} beside it)"
    )
    raise ModelError(
        f"{files.checkpoint}: refusing to load this fairseq checkpoint: {why}. Loading a fairseq "
        f"checkpoint unpickles it, which can run arbitrary code. {TRUST_HINT}"
    )


# -- unpickling -----------------------------------------------------------------------------------------

# torch's safe_globals() adds to one process-wide set and, on exit, removes what it added: a second thread
# loading at that moment (the nightly's pipelines load the shared teacher side by side) lost the allow-list
# and failed with "Unsupported global: argparse.Namespace". One allow-listed load at a time: the process-wide
# model-loading lock (models.runtime.loading), which every other load takes too.


@contextlib.contextmanager
def allow_listed() -> Iterator[None]:
    """torch's ``safe_globals`` with augdag's allow-list, one holder at a time: the allow-list is
    process-wide, and one holder's exit would remove it from under a concurrent ``torch.load``."""
    import torch

    with loading(), torch.serialization.safe_globals(list(ALLOWED_GLOBALS)):
        yield


def load_state(files: FairseqFiles, trusted: bool) -> tuple[dict[str, Any], bool]:
    """The checkpoint's state, ready for ``load_model_ensemble_and_task(state=…)``, and whether it was loaded
    allow-listed (augdag's own) rather than fully unpickled (``trusted`` by the user).

    Raises:
        ModelError: the checkpoint is not trusted, or cannot be unpickled.
    """
    data = files.checkpoint.read_bytes()  # hashed and unpickled from the same bytes
    allow_listed = trust(files, hashlib.sha256(data).hexdigest(), trusted)
    return fairseq_state(unpickle(files, data, weights_only=allow_listed), files.directory), allow_listed


def unpickle(files: FairseqFiles, data: bytes, *, weights_only: bool) -> dict[str, Any]:
    """``torch.load`` of the checkpoint's bytes: allow-listed (``ALLOWED_GLOBALS``) with ``weights_only``,
    else fully."""
    import torch

    try:
        if not weights_only:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
        with allow_listed():
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, … for a bad or foreign file
        hint = f" It needs more than augdag allow-lists ({_allow_list_names()}). {TRUST_HINT}" if weights_only else ""
        raise ModelError(f"{files.checkpoint}: cannot load the fairseq checkpoint: {_load_error(e)}.{hint}") from e


def _load_error(e: Exception) -> str:
    """The reason in torch's long weights_only message (which also advises ``weights_only=False``)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    reason = next((line for line in lines if line.startswith("WeightsUnpickler error:")), lines[0] if lines else "")
    return f"{type(e).__name__}: {reason.split('. Please use')[0]}"


def _allow_list_names() -> str:
    return ", ".join(f"{g.__module__}.{g.__qualname__}" for g in ALLOWED_GLOBALS)


def fairseq_state(state: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """What fairseq's ``load_checkpoint_to_cpu`` does after ``torch.load``: ``cfg`` as an OmegaConf config,
    the data directory (the dictionaries) pointed at the model directory, old checkpoints upgraded."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name
    from omegaconf import OmegaConf

    overrides = {"data": str(data_dir)}
    if state.get("args") is not None:
        for name, value in overrides.items():
            setattr(state["args"], name, value)
    if state.get("cfg") is not None:
        state["cfg"] = OmegaConf.create(state["cfg"], flags={"allow_objects": True})
        overwrite_args_by_name(state["cfg"], overrides)
    return checkpoint_utils._upgrade_state_dict(state)  # fairseq's own step; it has no public name
