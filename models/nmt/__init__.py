"""NMT backends behind one interface (``models.nmt.base.NMTModel``): fairseq, transformers, CTranslate2.

``load_model`` picks the backend from the model card augdag writes (``augdag_nmt.json``), else from the
files in the directory, else (a name that is not a local path) treats it as a Hugging Face model.
"""

from __future__ import annotations

from pathlib import Path

from conf.errors import ModelError
from models.nmt.base import (
    CARD,
    DecodeOptions,
    ModelCard,
    NMTModel,
    length_batches,
    pick_device,
    sentence_score,
)

__all__ = [
    "CARD",
    "DecodeOptions",
    "ModelCard",
    "NMTModel",
    "detect_backend",
    "length_batches",
    "load_model",
    "pick_device",
    "sentence_score",
]


def detect_backend(model: str | Path) -> str:
    """The backend of a model directory: its card, else CTranslate2 (model.bin), transformers (config.json),
    fairseq (a *.pt checkpoint). A string that is no local path is a Hugging Face name (transformers)."""
    path = Path(model)
    if not path.exists():
        return "transformers"
    if path.is_file():
        path = path.parent
    if (card := ModelCard.read(path)) is not None:
        return card.backend
    if (path / "model.bin").is_file():
        return "ctranslate2"
    if (path / "config.json").is_file():
        return "transformers"
    if any(path.glob("*.pt")):
        return "fairseq"
    raise ModelError(
        f"{model}: no NMT model found (expected {CARD}, a CTranslate2 model.bin, a transformers "
        "config.json or a fairseq *.pt checkpoint)"
    )


def load_model(
    model: str | Path,
    *,
    backend: str = "auto",
    trusted: bool = False,
    device: str = "auto",
    threads: int = 0,
    compute_type: str = "default",
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> NMTModel:
    """Load a translation model by local path (any backend) or Hugging Face name (transformers).
    ``src_lang``/``tgt_lang``: the language codes of a multilingual model (M2M100, NLLB); fairseq ignores them."""
    backend = detect_backend(model) if backend == "auto" else backend
    if backend == "fairseq":
        from models.nmt.fairseq import FairseqModel

        return FairseqModel.load(model, trusted=trusted, device=device, threads=threads)
    if backend == "transformers":
        from models.nmt.transformers import TransformersModel

        return TransformersModel.load(model, device=device, threads=threads, src_lang=src_lang, tgt_lang=tgt_lang)
    if backend == "ctranslate2":
        from models.nmt.ctranslate2 import CT2Model

        return CT2Model.load(
            model, device=device, threads=threads, compute_type=compute_type, src_lang=src_lang, tgt_lang=tgt_lang
        )
    raise ModelError(f"{model}: unknown NMT backend {backend!r}; expected fairseq, transformers or ctranslate2")
