"""fairseq backend inference: score and translate with a fairseq translation model.

    score(y | x) = [log p(y_1 | x, </s>), …, log p(y_t | x, y_<t), …, log p(</s> | x, y)]   (natural log)

What is fairseq's and what is hand-written here, and why:

- Training is ``models.nmt.fairseq_train`` (fairseq's CLIs in a subprocess).
- Loading goes through ``models.nmt.fairseq_checkpoint``: the checkpoint is unpickled only when augdag
  trained it (allow-listed, ``weights_only``) or the config marks it ``trusted``, then handed to fairseq's
  ``load_model_ensemble_and_task(state=…)``. A model is loaded once per process (``lru_cache``), again
  when its checkpoint or card changes.
- Scoring is a batched teacher-forced forward pass (fairseq's ``SequenceScorer`` needs its dataset
  collater and loops over sentences for its output; the tests check the numbers against it).
- Translation is fairseq's ``SequenceGenerator`` (beam search, ``search.Sampling``, or PCC's bottom-k,
  ``models.nmt.fairseq_bottom_k``) unchanged; only the batching by length and the subword round trip are here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.nmt.base import (
    DecodeOptions,
    ModelCard,
    NMTModel,
    Progress,
    check_pairs,
    length_batches,
    pick_device,
)
from models.nmt.fairseq_bottom_k import bottom_k_sampling
from models.nmt.fairseq_checkpoint import (
    SUBWORDS,
    FairseqFiles,
    allow_listed,
    load_state,
    locate,
    stamp,
    trust,
)
from models.nmt.fairseq_train import train_fairseq, train_fairseq_batches
from models.nmt.subwords import SentencePiece, one_line
from models.runtime import loading, seeded, step_seed, torch_threads
from storage.artifacts import hash_file, hash_inputs

# train_fairseq(_batches) live in models.nmt.fairseq_train; re-exported here only for tasks/common/nmt.py and
# bench/nmt_models.py, which import them from models.nmt.fairseq.
__all__ = ["FairseqModel", "train_fairseq", "train_fairseq_batches"]


class FairseqModel(NMTModel):
    """A fairseq translation model (one checkpoint, its dictionaries, its subword model) on one device."""

    backend = "fairseq"

    def __init__(self, files: FairseqFiles, *, model: Any, task: Any, device: str, allow_listed: bool):
        self.path = files.directory
        self.files = files
        self.model = model
        self.task = task
        self.device = device
        self.allow_listed = allow_listed  # False: unpickled fully because the user trusts it
        self.src_dict, self.tgt_dict = task.source_dictionary, task.target_dictionary
        self.subwords = SentencePiece(files.subwords) if files.subwords is not None else None
        self._generators: dict[DecodeOptions, Any] = {}

    @classmethod
    def load(cls, model: str | Path, *, trusted: bool = False, device: str = "auto", threads: int = 0) -> FairseqModel:
        """Load (once per process) a fairseq model directory, or the directory around a checkpoint file.

        Args:
            model: The directory (or its ``*.pt`` checkpoint). Without a card, the dictionaries are the
                directory's ``dict.*.txt``, the subword model ``spm.model`` or ``sentencepiece.bpe.model``
                when present, else text is taken as already tokenised (space-separated tokens).
            trusted: Unpickle the checkpoint even though augdag did not train it.
            device: auto, cpu or cuda.
            threads: CPU threads (0: every core).

        Raises:
            ModelError: the checkpoint is not trusted (see ``models.nmt.fairseq_checkpoint``), or cannot be loaded.
        """

        files = locate(model)
        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        return _load_cached(files.checkpoint.resolve(), stamp(files), trusted, device)

    @classmethod
    def _load_uncached(cls, checkpoint: Path, trusted: bool, device: str) -> FairseqModel:
        from fairseq import checkpoint_utils

        files = locate(checkpoint)
        state, allow_listed = load_state(files, trusted)
        try:
            with loading():
                models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], state=state)
        except Exception as e:  # fairseq raises bare exceptions for missing dictionaries, unknown archs, …
            raise ModelError(
                f"{checkpoint}: fairseq could not build the model: {e}. Hint: the directory needs "
                "the dictionaries (dict.<lang>.txt) the model was trained with"
            ) from e
        net = models[0].to(device).eval()
        return cls(files, model=net, task=task, device=device, allow_listed=allow_listed)

    # -- the interface ------------------------------------------------------------------------------

    def score(self, src: Sequence[str], tgt: Sequence[str], *, max_tokens: int = 4096) -> list[np.ndarray | None]:
        """Teacher-forced natural-log probabilities of each target token, EOS included (float32).

        ``None`` for a pair with an empty side (after subwords) or longer than the model's positions.
        Pairs run in batches of similar length, at most ``max_tokens`` padded tokens each."""
        check_pairs(src, tgt)
        s_ids, t_ids = self._ids(src, self.src_dict), self._ids(tgt, self.tgt_dict)
        max_src, max_tgt = self.max_positions()
        ok = [i for i, (s, t) in enumerate(zip(s_ids, t_ids)) if s and t and len(s) + 1 <= max_src and len(t) + 1 <= max_tgt]
        out: list[np.ndarray | None] = [None] * len(src)
        lengths = [max(len(s_ids[i]), len(t_ids[i])) + 1 for i in ok]
        for batch in length_batches(lengths, max_tokens=max_tokens):
            rows = [ok[j] for j in batch]
            for i, logprobs in zip(rows, self._score_batch([s_ids[i] for i in rows], [t_ids[i] for i in rows])):
                out[i] = logprobs
        return out

    def translate(
        self,
        src: Sequence[str],
        options: DecodeOptions = DecodeOptions(),  # noqa: B008 (frozen)
        *,
        max_tokens: int = 4096,
        progress: Progress | None = None,
    ) -> list[str]:
        """Translations of ``src`` in order: beam search, or one sample per sentence (``options.sampling``,
        seeded with ``options.seed``). An empty sentence translates to ""; a source longer than the
        model's positions is cut to them. ``max_tokens`` counts source tokens per batch. A hypothesis has at most
        max_len_a · (the batch's longest source, EOS included) + max_len_b tokens (``SequenceGenerator``'s bound)."""
        import torch

        max_src = self.max_positions()[0]
        ids = [s[: max_src - 1] for s in self._ids(src, self.src_dict)]
        todo = [i for i, s in enumerate(ids) if s]
        hyps: dict[int, Any] = {}
        generator = self._generator(options)
        done = len(src) - len(todo)  # the empty ones; `progress` hears the sentences done after each batch
        with torch.inference_mode():
            for k, batch in enumerate(length_batches([len(ids[i]) + 1 for i in todo], max_tokens=max_tokens)):
                rows = [todo[j] for j in batch]
                tokens, lengths = self._collate_source([ids[i] for i in rows])
                with self._seeded(options, k):
                    found = generator.generate([self.model], {"net_input": {"src_tokens": tokens, "src_lengths": lengths}})
                hyps.update((i, h[0]["tokens"]) for i, h in zip(rows, found))
                done += len(rows)
                if progress is not None:
                    progress(done)
        return self._detokenise([hyps.get(i) for i in range(len(src))])

    def translate_constrained(
        self,
        src: Sequence[str],
        *,
        banned: Sequence[Sequence[str]],
        required: Sequence[Sequence[str]],
        beam: int = 4,
        nbest: int = 1,
        lenpen: float = 1.0,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        max_tokens: int = 4096,
    ) -> list[list[str]]:
        """The ``nbest`` best hypotheses of a beam search per sentence (an empty source: none), never emitting
        the first subword of a ``banned`` word (as written, lower-cased or capitalised) and, where a
        sentence has ``required`` words, holding each one (fairseq's lexically constrained beam search;
        ``models.nmt.fairseq_constrained``). A word whose subwords fall outside the dictionary cannot be
        required: it is left out of the constraints (the caller checks the output)."""
        import torch

        from models.nmt.fairseq_constrained import banned_mask, constrained_generator, packed_constraints

        d, unk = self.tgt_dict, self.tgt_dict.unk()
        first = lambda w: [i for i in self._ids([w], d)[0] if self.tgt_dict[i] != "▁"][:1]  # noqa: E731
        bans = [
            sorted({i for w in words for v in {w, w.lower(), w.capitalize()} for i in first(v) if i != unk}) for words in banned
        ]
        needs = [[ids for w in words if (ids := self._ids([w], d)[0]) and unk not in ids] for words in required]
        max_src = self.max_positions()[0]
        ids = [s[: max_src - 1] for s in self._ids(src, self.src_dict)]
        todo = [i for i, s in enumerate(ids) if s]
        out: list[list[str]] = [[] for _ in src]
        longest = max((sum(len(p) for p in phrases) for phrases in needs), default=0)  # room for the constraints
        generator = (
            constrained_generator(
                self.model, d, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b + longest, positive=any(needs)
            )
            .to(self.device)
            .eval()
        )
        with torch.inference_mode():
            for batch in length_batches([(len(ids[i]) + 1) * beam for i in todo], max_tokens=max_tokens):
                rows = [todo[j] for j in batch]
                tokens, lengths = self._collate_source([ids[i] for i in rows])
                generator.search.banned = banned_mask([bans[i] for i in rows], len(d))
                extra = {"constraints": packed_constraints([needs[i] for i in rows]).to(self.device)} if any(needs) else {}
                found = generator.generate([self.model], {"net_input": {"src_tokens": tokens, "src_lengths": lengths}}, **extra)
                for i, hyps in zip(rows, found):
                    out[i] = self._detokenise([h["tokens"] for h in hyps[:nbest]])
        return out

    def fingerprint(self) -> str:
        """A content hash of the checkpoint, the dictionaries and the subword model."""
        files = [self.files.checkpoint, *sorted(self.path.glob("dict.*.txt"))]
        return hash_inputs(files + ([self.files.subwords] if self.files.subwords is not None else []))

    def max_positions(self) -> tuple[int, int]:
        """The longest source and target, in tokens with EOS, that the model takes."""
        from fairseq import utils

        src, tgt = utils.resolve_max_positions(self.task.max_positions(), self.model.max_positions())
        return int(src), int(tgt)

    def to_ctranslate2(self, out_dir: Path, *, quantization: str | None = None) -> Path:
        """Convert to a CTranslate2 model directory (``models.nmt.ctranslate2``) with the subword model and a
        card naming this model's fingerprint, written last.

        The converter unpickles the checkpoint again, under the same trust: allow-listed for augdag's own
        (whose sha256 is checked again first), fully for a user-trusted one. It deletes ``out_dir`` before
        writing, so ``out_dir`` must be new, empty, or a CTranslate2 model augdag converted before.

        Raises:
            ModelError: ``out_dir`` holds something else, or CTranslate2 cannot convert this model.
        """
        from ctranslate2.converters import FairseqConverter

        out_dir = Path(out_dir)
        _check_conversion_target(out_dir)
        cfg = self.task.cfg
        converter = FairseqConverter(
            str(self.files.checkpoint),
            str(self.path),
            source_lang=cfg.source_lang,
            target_lang=cfg.target_lang,
            unsafe_deserialization=not self.allow_listed,
        )
        with self._conversion_guard():
            try:
                converter.convert(str(out_dir), quantization=quantization, force=True)
            except (NotImplementedError, ValueError, RuntimeError) as e:
                raise ModelError(
                    f"{self.files.checkpoint}: CTranslate2 cannot convert this model (quantization {quantization!r}): {e}"
                ) from e
        if self.files.subwords is not None:
            shutil.copyfile(self.files.subwords, out_dir / SUBWORDS)
        ModelCard(
            backend="ctranslate2",
            subwords=SUBWORDS if self.files.subwords is not None else None,
            converted_from="fairseq",
            source_fingerprint=self.fingerprint(),
            meta={"quantization": quantization, "source": str(self.files.checkpoint), "max_positions": min(self.max_positions())},
        ).write(out_dir)
        return out_dir

    # -- helpers ------------------------------------------------------------------------------------

    def pieces(self, texts: Sequence[str]) -> list[list[str]]:
        """The tokens the model sees: SentencePiece pieces, or whitespace-separated tokens without one."""
        if self.subwords is None:
            return [t.split() for t in texts]
        return self.subwords.encode([one_line(t) for t in texts])

    def _ids(self, texts: Sequence[str], dictionary: Any) -> list[list[int]]:
        index, unk = dictionary.indices, dictionary.unk()
        return [[index.get(p, unk) for p in ps] for ps in self.pieces(texts)]

    def _collate_source(self, ids: list[list[int]]) -> tuple[Any, Any]:
        """Source tokens with EOS, left-padded (fairseq's translation default), and their lengths."""
        import torch
        from fairseq.data import data_utils

        rows = [torch.tensor(s + [self.src_dict.eos()], dtype=torch.long) for s in ids]
        tokens = data_utils.collate_tokens(rows, self.src_dict.pad(), left_pad=True)
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        return tokens.to(self.device), lengths.to(self.device)

    def _score_batch(self, src_ids: list[list[int]], tgt_ids: list[list[int]]) -> list[np.ndarray]:
        """One forward pass: log p(target token | source, previous target tokens) for each row."""
        import torch
        from fairseq.data import data_utils

        d = self.tgt_dict
        src_tokens, src_lengths = self._collate_source(src_ids)
        rows = [torch.tensor(t + [d.eos()], dtype=torch.long) for t in tgt_ids]
        target = data_utils.collate_tokens(rows, d.pad(), d.eos(), left_pad=False).to(self.device)
        prev = data_utils.collate_tokens(rows, d.pad(), d.eos(), left_pad=False, move_eos_to_beginning=True).to(self.device)
        with torch.inference_mode():
            net_out = self.model(src_tokens, src_lengths, prev)
            logprobs = self.model.get_normalized_probs(net_out, log_probs=True)
            picked = logprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).float().cpu().numpy()
        return [picked[k, : len(r)].copy() for k, r in enumerate(rows)]

    def _generator(self, options: DecodeOptions) -> Any:
        key = dataclasses.replace(options, seed=0)
        if key not in self._generators:
            from fairseq import search
            from fairseq.sequence_generator import SequenceGenerator

            sampling = bottom_k_sampling() if options.sampling and options.bottom_k and options.bottom_k_steps else None
            strategy = (
                (sampling or search.Sampling)(
                    self.tgt_dict, sampling_topk=options.topk or -1, sampling_topp=options.topp if options.topp < 1 else -1.0
                )
                if options.sampling
                else None
            )
            if sampling is not None:
                strategy.bottom_k, strategy.bottom_k_steps = options.bottom_k, options.bottom_k_steps
            self._generators[key] = (
                SequenceGenerator(
                    [self.model],
                    self.tgt_dict,
                    beam_size=1 if options.sampling else options.beam,
                    max_len_a=options.max_len_a,
                    max_len_b=options.max_len_b,
                    len_penalty=options.lenpen,
                    temperature=options.temperature,
                    search_strategy=strategy,
                )
                .to(self.device)
                .eval()
            )
        return self._generators[key]

    @contextlib.contextmanager
    def _seeded(self, options: DecodeOptions, batch: int) -> Iterator[None]:
        """Sampling draws from torch's global generator (fairseq takes no generator): own it for one batch
        (``models.runtime.seeded``: the process-wide lock, the seed of (seed, batch), the caller's state given
        back after), so that other pipelines' model work interleaves between batches."""
        if not options.sampling:
            yield
            return
        with seeded(step_seed(options.seed, batch), self.device):
            yield

    def _detokenise(self, hyps: list[Any]) -> list[str]:
        strings = ["" if h is None else tokens_string(self.tgt_dict, h) for h in hyps]
        if self.subwords is None:
            return strings
        return self.subwords.decode([s.split() for s in strings])

    @contextlib.contextmanager
    def _conversion_guard(self) -> Iterator[None]:
        """For augdag's own checkpoint: the file still has the hash it was loaded with, and the converter's
        ``torch.load(weights_only=True)`` sees the same allow-list."""
        if not self.allow_listed:
            yield
            return
        sha = hash_file(self.files.checkpoint)
        trust(self.files, sha, trusted=False)
        with allow_listed():  # the loader's lock: a concurrent load keeps its allow-list
            yield


def _check_conversion_target(out_dir: Path) -> None:
    """CTranslate2's converter removes its output directory first: only a new, empty or converted one."""
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    card = ModelCard.read(out_dir)
    if card is None or card.backend != "ctranslate2":
        raise ModelError(
            f"{out_dir}: not empty and not a CTranslate2 model augdag converted; converting there "
            "would delete its files. Hint: convert into a new directory"
        )


@functools.lru_cache(maxsize=4)
def _load_cached(checkpoint: Path, files_stamp: tuple[Any, ...], trusted: bool, device: str) -> FairseqModel:
    del files_stamp  # part of the cache key only
    return FairseqModel._load_uncached(checkpoint, trusted, device)


def tokens_string(dictionary: Any, tokens: Any) -> str:
    """fairseq's ``Dictionary.string(tokens)`` with its defaults (no BPE symbol, ``<unk>`` unescaped, eos and bos left
    out) for a 1-D tensor of a plain ``Dictionary``, over ``tokens.tolist()``: fairseq iterates the tensor element by
    element (a 0-d tensor and ``.item()`` per token), a fifth of the demo's paraphrase generation. Any other dictionary
    class goes through fairseq's own method."""
    from fairseq.data import Dictionary

    if type(dictionary) is not Dictionary or tokens.dim() != 1:
        return dictionary.string(tokens.cpu())
    symbols, unk, unk_word = dictionary.symbols, dictionary.unk(), dictionary.unk_word
    skip, n = {dictionary.eos(), dictionary.bos()}, len(symbols)
    return " ".join(unk_word if i == unk or i >= n else symbols[i] for i in tokens.tolist() if i not in skip)
