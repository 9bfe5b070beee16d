"""Subwords inside the backends: a joint SentencePiece model (BPE) trained on both sides of the bitext.

fairseq and its CTranslate2 conversion see pieces; the user sees text. ``SentencePiece`` is the one
place where text becomes pieces and pieces become text again.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from conf.errors import ModelError


def one_line(text: str) -> str:
    """A text as one line of single-space-separated words: what becomes pieces (training and inference alike)."""
    return " ".join(text.split())


def train_sentencepiece(texts: Iterable[str], model_path: Path, *, vocab_size: int = 1000, model_type: str = "bpe") -> Path:
    """Train a SentencePiece model on ``texts`` and write it to ``model_path`` (a ``.model`` file).

    The vocabulary is capped at what the corpus supports (SentencePiece refuses a larger one), so a
    tiny corpus still trains. Deterministic: the first 2M sentences, no shuffling. No special pieces besides
    <unk>: fairseq adds its own <s>, <pad>, </s>.
    ``texts`` is streamed, never held as a list: SentencePiece pulls sentences (blank ones skipped) until it
    has its 2M and stops pulling, so a generator over a corpus of any size reads only that much of it.
    """
    import sentencepiece as spm

    sentences = (t for t in texts if t.strip())
    first = next(sentences, None)
    if first is None:
        raise ModelError(f"{model_path}: no text to train the subword model on")
    failed: list[Exception] = []  # what ``texts`` raised: SentencePiece would turn it into a RuntimeError

    def pulled() -> Iterator[str]:
        try:
            yield first
            yield from sentences
        except Exception as e:
            failed.append(e)
            raise

    model, stream = io.BytesIO(), pulled()
    kwargs = {
        "sentence_iterator": stream,
        "model_writer": model,
        "model_type": model_type,
        "character_coverage": 1.0,
        "bos_id": -1,
        "eos_id": -1,
        "pad_id": -1,
        "unk_id": 0,
        "input_sentence_size": 2_000_000,
        "shuffle_input_sentence": False,
        "num_threads": 1,
        "hard_vocab_limit": False,
        "minloglevel": 2,
    }
    try:
        spm.SentencePieceTrainer.train(vocab_size=vocab_size, **kwargs)
    except RuntimeError as e:
        if failed:
            raise failed[0] from None
        raise ModelError(f"{model_path}: SentencePiece training failed: {e}") from e
    finally:
        stream.close()  # SentencePiece stops pulling at its 2M: let go of the rest (an open file, a generator)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    model_path.write_bytes(model.getvalue())
    return model_path


class SentencePiece:
    """Encode text to pieces and decode pieces to text with one SentencePiece model file."""

    def __init__(self, model_path: Path | str):
        import sentencepiece as spm

        self.path = Path(model_path)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: subword model not found")
        self._sp = spm.SentencePieceProcessor(model_file=str(self.path))

    def encode(self, texts: Sequence[str]) -> list[list[str]]:
        return self._sp.encode(list(texts), out_type=str)

    def decode(self, pieces: Sequence[Sequence[str]]) -> list[str]:
        return [self._sp.decode_pieces(list(p)) for p in pieces]

    def pieces(self) -> list[str]:
        return [self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())]


@functools.lru_cache(maxsize=8)
def load_sentencepiece(model_path: str) -> SentencePiece:
    return SentencePiece(model_path)
