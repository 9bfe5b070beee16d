"""``bilstm``: the Bi-LSTM slot tagger of C2C-GenDA's experiments, optionally with a CRF on top.

    e_t = dropout(E[w_t]);  h_t = [→LSTM(e)_t ; ←LSTM(e)_t]  (``layers`` deep);  s_t = W·dropout(h_t) + b
    softmax: tag_t = argmax s_t, loss = mean token cross-entropy
    crf:     tags = Viterbi(s, transitions), loss = −log p(tags | s) per token (torchcrf, ``token_mean``)

Hand-written here: the module (embedding, LSTM, output layer wired together), the encoding of words into
ids (``<unk>`` for unseen words, optional word dropout) and the padding. From torch: ``nn.Embedding``,
``nn.LSTM`` (run on packed sequences, so neither direction ever reads a pad and a sentence's tags do not
depend on the batch it is in), the cross-entropy; from pytorch-crf (``torchcrf.CRF``): the CRF's
likelihood and Viterbi decoding. Weights are saved as ``model.safetensors`` (safetensors).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from conf.errors import ModelError
from models.tagger.settings import PAD, UNK, WEIGHTS, TaggerSettings


class BiLSTMNet(nn.Module):
    """Embedding → dropout → Bi-LSTM → dropout → linear emissions (→ CRF)."""

    def __init__(self, n_words: int, n_tags: int, settings: TaggerSettings):
        super().__init__()
        self.embed = nn.Embedding(n_words, settings.embedding_dim, padding_idx=0)
        self.drop = nn.Dropout(settings.dropout)
        self.lstm = nn.LSTM(
            settings.embedding_dim,
            settings.hidden,
            num_layers=settings.layers,
            bidirectional=True,
            batch_first=True,
            dropout=settings.dropout if settings.layers > 1 else 0.0,
        )
        self.out = nn.Linear(2 * settings.hidden, n_tags)
        if settings.crf:
            from torchcrf import CRF

            self.crf = CRF(n_tags, batch_first=True)
        else:
            self.crf = None

    def emissions(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(batch, time) word ids and the (batch,) lengths (all ≥ 1) → (batch, time, tags) scores."""
        x = self.drop(self.embed(words))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=words.shape[1])
        return self.out(self.drop(h))

    def loss(self, words: torch.Tensor, lengths: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        scores = self.emissions(words, lengths)
        mask = torch.arange(words.shape[1], device=words.device)[None, :] < lengths[:, None]
        if self.crf is not None:
            return -self.crf(scores, tags, mask=mask, reduction="token_mean")
        return F.cross_entropy(scores[mask], tags[mask])

    def decode(self, words: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
        scores = self.emissions(words, lengths)
        if self.crf is not None:
            mask = torch.arange(words.shape[1], device=words.device)[None, :] < lengths[:, None]
            return self.crf.decode(scores, mask=mask)
        best = scores.argmax(-1).tolist()
        return [row[:n] for row, n in zip(best, lengths.tolist())]


class BiLSTMBackend:
    """The ``bilstm`` kind behind ``SlotTagger`` and ``train_tagger``: words → ids → ``BiLSTMNet``."""

    kind = "bilstm"

    def __init__(
        self,
        settings: TaggerSettings,
        vocab: Sequence[str],
        tags: Sequence[str],
        device: str,
        *,
        singletons: Collection[str] = (),
    ):
        if list(vocab[:2]) != [PAD, UNK]:
            raise ModelError(f"bilstm vocabulary starts {list(vocab[:2])}; expected [{PAD!r}, {UNK!r}]")
        self.settings, self.vocab, self.tags, self.device = settings, list(vocab), list(tags), device
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.singletons = np.array(sorted(self.index[w] for w in singletons if w in self.index), dtype=np.int64)
        self.module = BiLSTMNet(len(self.vocab), len(self.tags), settings).to(device)

    def _batch(
        self,
        sentences: Sequence[Sequence[str]],
        rng: np.random.Generator | None = None,
        tag_ids: Sequence[Sequence[int]] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        lengths = [len(s) for s in sentences]
        words = np.zeros((len(sentences), max(lengths)), dtype=np.int64)  # 0 = <pad>
        for i, sentence in enumerate(sentences):
            words[i, : len(sentence)] = [self.index.get(self.settings.normalise(w), 1) for w in sentence]
        if rng is not None and self.settings.word_dropout > 0 and len(self.singletons):
            draw = rng.random(words.shape) < self.settings.word_dropout
            words[draw & np.isin(words, self.singletons)] = 1  # 1 = <unk>
        out = [torch.from_numpy(words).to(self.device), torch.tensor(lengths, device=self.device)]
        if tag_ids is not None:
            tags = np.zeros(words.shape, dtype=np.int64)
            for i, row in enumerate(tag_ids):
                tags[i, : len(row)] = row
            out.append(torch.from_numpy(tags).to(self.device))
        return tuple(out)

    def loss(
        self, sentences: Sequence[Sequence[str]], tag_ids: Sequence[Sequence[int]], rng: np.random.Generator
    ) -> torch.Tensor:
        """The batch's training loss (sentences non-empty); ``rng`` draws the word dropout."""
        return self.module.loss(*self._batch(sentences, rng, tag_ids))

    def decode(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """Tag ids, one per word, for non-empty sentences (the module in eval mode, under inference_mode)."""
        return self.module.decode(*self._batch(sentences))

    def save(self, out: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in self.module.state_dict().items()}, str(Path(out) / WEIGHTS))

    @classmethod
    def load(
        cls, path: Path, settings: TaggerSettings, vocab: Sequence[str] | None, tags: Sequence[str], device: str
    ) -> BiLSTMBackend:
        from safetensors.torch import load_file

        weights = Path(path) / WEIGHTS
        if vocab is None or not weights.is_file():
            raise ModelError(
                f"{path}: expected a bilstm tagger's vocabulary in tagger.json and {WEIGHTS}; "
                f"found {'no vocabulary' if vocab is None else f'no {WEIGHTS}'}"
            )
        backend = cls(settings, vocab, tags, device)
        try:
            backend.module.load_state_dict(load_file(str(weights), device=device))
        except (RuntimeError, OSError) as e:
            raise ModelError(f"{weights}: does not fit the network tagger.json describes ({e})") from e
        return backend
