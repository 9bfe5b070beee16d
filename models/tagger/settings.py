"""``TaggerSettings`` and ``tagger.json``, the card every tagger directory carries.

The defaults are the Bi-LSTM slot-filling tagger of C2C-GenDA's experiments (Hou et al., AAAI 2021, via the authors'
pointer to AtmaHou/Bi-LSTM_PosTagger): a 2-layer Bi-LSTM with
128 hidden units per direction over 300-d word embeddings, dropout 0.5, Adam at lr 0.01, batches of 128,
100 epochs, gradient norm clipped at 5, the test F1 taken at the best dev F1 (conlleval's convention).
The paper's embeddings are GloVe; GloVe is not available offline, so ours start random (torch's
``nn.Embedding`` initialisation, seeded) — expect lower F1 than the paper's with little data.

``tagger.json`` holds the settings, the tag set and, for ``bilstm``, the vocabulary; written last, so a
directory without it is not a finished tagger.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from conf.errors import ConfError, ModelError

CARD = "tagger.json"
CARD_FORMAT = 1
WEIGHTS = "model.safetensors"  # bilstm: the whole module (hf: save_pretrained writes its own files)
PAD, UNK = "<pad>", "<unk>"  # vocabulary ids 0 and 1
OUTSIDE = "O"  # always in the tag set, at index 0: the tag of a word the model does not see (hf truncation)
DEFAULT_LR = {"bilstm": 0.01, "hf": 5e-5}  # Adam (the authors' tagger) / AdamW (the usual fine-tuning rate)


@dataclasses.dataclass(frozen=True)
class TaggerSettings:
    """How a slot tagger is built and trained (defaults: the C2C-GenDA paper's Bi-LSTM, see the module doc)."""

    kind: str = "bilstm"  # bilstm | hf
    model: str | None = None  # hf: a Hugging Face token-classification model or encoder, by name or local path
    crf: bool = False  # bilstm: a linear-chain CRF (torchcrf) on the emissions, Viterbi decoding
    embedding_dim: int = 300  # the paper's GloVe size; random init here (offline)
    hidden: int = 128  # per direction
    layers: int = 2
    dropout: float = 0.5  # on the embeddings, between LSTM layers and before the output layer
    lr: float | None = None  # None: DEFAULT_LR[kind]
    batch_size: int = 128
    epochs: int = 100
    clip: float = 5.0  # max gradient L2 norm; 0: no clipping
    seed: int = 0
    lowercase: bool = False  # words lower-cased before the vocabulary (bilstm) or the tokenizer (hf)
    word_dropout: float = 0.0  # bilstm: probability a word seen once in training is fed as <unk> (not the paper's)

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ConfError:
            return ConfError(f"tagger.{key} = {getattr(self, key)!r}: {why}")

        if self.kind not in DEFAULT_LR:
            raise bad("kind", "expected bilstm or hf")
        if self.kind == "hf" and not self.model:
            raise bad("model", "kind hf needs a Hugging Face model name or local path")
        if self.kind == "bilstm" and self.model is not None:
            raise bad("model", "kind bilstm builds its own network; leave model unset (or use kind: hf)")
        if self.kind == "hf" and (self.crf or self.word_dropout):
            raise bad("crf" if self.crf else "word_dropout", "only kind bilstm has a CRF layer and word dropout")
        for key in ("embedding_dim", "hidden", "layers", "batch_size", "epochs"):
            if getattr(self, key) < 1:
                raise bad(key, "must be at least 1")
        if not 0 <= self.dropout < 1 or not 0 <= self.word_dropout < 1:
            raise bad("dropout" if not 0 <= self.dropout < 1 else "word_dropout", "must be in [0, 1)")
        if self.lr is not None and self.lr <= 0:
            raise bad("lr", "must be > 0 (or null for the kind's default)")
        if self.clip < 0:
            raise bad("clip", "must be >= 0 (0: no clipping)")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.kind]

    def normalise(self, word: str) -> str:
        return word.lower() if self.lowercase else word


def tag_set(tags: Iterable[Sequence[str]]) -> list[str]:
    """``O`` first, then every other tag seen in training, sorted (index = the model's output unit)."""
    return [OUTSIDE, *sorted({t for row in tags for t in row} - {OUTSIDE})]


def vocabulary(sentences: Iterable[Sequence[str]], settings: TaggerSettings) -> tuple[list[str], set[str]]:
    """``<pad>``, ``<unk>``, then every training word (min count 1) by falling count, ties alphabetical;
    and the words seen exactly once (the candidates of ``word_dropout``)."""
    counts = Counter(settings.normalise(w) for row in sentences for w in row)
    for special in (PAD, UNK):  # a literal "<unk>" in the data is the unknown word
        counts.pop(special, None)
    words = sorted(counts, key=lambda w: (-counts[w], w))
    return [PAD, UNK, *words], {w for w, n in counts.items() if n == 1}


def write_card(
    out: Path, settings: TaggerSettings, tags: Sequence[str], *, vocab: Sequence[str] | None, trained: dict[str, Any]
) -> None:
    card = {
        "format": CARD_FORMAT,
        "settings": dataclasses.asdict(settings),
        "tags": list(tags),
        "vocab": list(vocab) if vocab is not None else None,
        "trained": trained,
    }
    tmp = Path(out) / (CARD + ".tmp")
    tmp.write_text(json.dumps(card, indent=1, ensure_ascii=False) + "\n")
    tmp.rename(Path(out) / CARD)


def read_card(path: Path) -> tuple[TaggerSettings, list[str], list[str] | None, dict[str, Any]]:
    """(settings, tags, vocabulary or None, training record) of a tagger directory."""
    card_path = Path(path) / CARD
    if not Path(path).is_dir():
        raise ModelError(f"{path}: no such directory; expected a slot tagger directory written by train_tagger (with {CARD})")
    if not card_path.is_file():
        raise ModelError(
            f"{path}: no {CARD}; expected a slot tagger directory written by train_tagger. Hint: a "
            "directory without it is an unfinished training run"
        )
    try:
        card = json.loads(card_path.read_text())
        if card.get("format") != CARD_FORMAT:
            raise ValueError(f"format {card.get('format')!r}, this code reads format {CARD_FORMAT}")
        settings = TaggerSettings(**card["settings"])
        return settings, list(card["tags"]), card["vocab"], card.get("trained", {})
    except (ValueError, TypeError, KeyError, ConfError) as e:
        raise ModelError(f"{card_path}: not a valid tagger card ({e})") from e
