"""fairseq backend: train a transformer with fairseq, then score and translate with it.

    score(y | x) = [log p(y_1 | x, </s>), …, log p(y_t | x, y_<t), …, log p(</s> | x, y)]   (natural log)

What is fairseq's and what is hand-written here, and why:

- Training is fairseq's own CLIs, ``fairseq_cli.preprocess`` (one joined dictionary) then
  ``fairseq_cli.train``, run one after the other in one subprocess of this interpreter (so the venv's
  fairseq runs, and fairseq is imported once: that import alone takes 10-20 s on 2 busy cores).
  Hand-written: the command lines built from ``NMTTrainConf``, the joint SentencePiece model around them,
  and the log streaming (each line to ``log``, the update count to ``progress``): fairseq's CLIs only print.
- Loading is hand-written around one ``torch.load`` call, because fairseq's ``load_checkpoint_to_cpu``
  calls ``torch.load`` without ``weights_only``, which torch ≥ 2.6 refuses for fairseq checkpoints
  (``Unsupported global: GLOBAL argparse.Namespace``), and offers no way to pass an allow-list. The
  checkpoint's bytes are read once, hashed, and unpickled from those same bytes:
  a checkpoint augdag trained (the card's ``checkpoint_sha256`` matches) with ``weights_only=True`` and
  ``ALLOWED_GLOBALS`` inside ``torch.serialization.safe_globals`` (a context manager: nothing stays
  allow-listed afterwards); a checkpoint the user's config marks ``trusted`` fully; anything else not at
  all. The card is no proof of origin (anyone who can place a checkpoint can write a card beside it), which
  is why augdag's own checkpoints still load with ``weights_only``. The state then goes to fairseq's
  ``load_model_ensemble_and_task(state=…)`` after the steps ``load_checkpoint_to_cpu`` applies.
- Scoring is a batched teacher-forced forward pass (fairseq's ``SequenceScorer`` needs its dataset
  collater and loops over sentences for its output; the tests check the numbers against it).
- Translation is fairseq's ``SequenceGenerator`` (beam search, or ``search.Sampling``) unchanged; only
  the batching by length and the subword round trip are here.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from conf.schema import NMTTrainConf
from models.nmt.base import (CARD, DecodeOptions, ModelCard, NMTModel, check_pairs, cpu_threads, length_batches,
                             pick_device)
from models.nmt.subwords import SentencePiece, train_sentencepiece

SRC, TGT = "src", "tgt"  # the language names of the models augdag trains (dict.src.txt, dict.tgt.txt)
CHECKPOINT = "checkpoint.pt"
SUBWORDS = "spm.model"
SUBWORD_NAMES = (SUBWORDS, "sentencepiece.bpe.model")  # looked for in a user's model directory
LOG_TAIL = 20  # log lines quoted when a fairseq command fails
_UPDATES = re.compile(r"num_updates[ =|]+(\d+)")
TRUST_HINT = ("augdag only loads fairseq checkpoints it trained itself (the directory's augdag_nmt.json "
              "carries the checkpoint's sha256) or that the config marks trusted. Hint: if you trust "
              "this file, set `trusted: true` in that model's config section (e.g. "
              "self_training.teacher.trusted), or pass trusted=True")


ALLOWED_GLOBALS = (argparse.Namespace,)
"""What a checkpoint augdag trained pickles besides tensors, numbers and containers: fairseq 0.12 stores its
command line (``cfg.model``) as an ``argparse.Namespace``. Found with ``torch.serialization.
get_unsafe_globals_in_checkpoint``; the tests check that it is still all."""


# -- training -------------------------------------------------------------------------------------------


def train_fairseq(src: Sequence[str], tgt: Sequence[str], out_dir: Path, conf: NMTTrainConf, *,
                  log: Callable[[str], None] = print, progress: Callable[[int, int], None] | None = None,
                  threads: int = 0, device: str = "auto") -> Path:
    """Train a fairseq transformer on the pairs (src[i], tgt[i]) and write a loadable model directory.

    A joint SentencePiece BPE model (``conf.vocab_size``) turns both sides into pieces; fairseq builds one
    joined dictionary and trains ``conf.max_update`` updates without validation. ``out_dir`` ends up
    holding ``checkpoint.pt`` (no optimizer state), ``dict.src.txt``, ``dict.tgt.txt``, ``spm.model`` and
    the card, written last, whose sha256 makes the checkpoint trusted; work files live in a temporary
    directory beside ``out_dir`` and are removed.

    Args:
        src: Source sentences (plain text).
        tgt: Their translations; pairs with an empty side are left out (``meta.pairs`` counts the rest).
        out_dir: The model directory to write (created; existing files of the same names are replaced).
        conf: Architecture, sizes and optimisation (``extra_args`` go to fairseq-train verbatim).
        log: Receives fairseq's output, one line at a time.
        progress: Called with (updates done, ``conf.max_update``) as fairseq reports them.
        threads: CPU threads of the training process (0: every core).
        device: auto, cpu or cuda (``pick_device``).

    Returns:
        ``out_dir``.

    Raises:
        ModelError: no pairs, or a fairseq command failed (the message quotes its last log lines).
    """
    check_pairs(src, tgt)
    out_dir = Path(out_dir)
    pairs = [(s, t) for s, t in zip(map(_one_line, src), map(_one_line, tgt)) if s and t]
    if not pairs:
        raise ModelError(f"{out_dir}: no pair with both sides non-empty to train on ({len(src)} given)")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CARD).unlink(missing_ok=True)  # the card comes last: a directory without one is unfinished
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.fairseq-work-", dir=out_dir.parent) as work:
        work = Path(work)
        sp = SentencePiece(train_sentencepiece([s for p in pairs for s in p], work / SUBWORDS,
                                               vocab_size=conf.vocab_size))
        for lang, side in ((SRC, 0), (TGT, 1)):
            _write_pieces(sp, [p[side] for p in pairs], work / f"train.{lang}")
        steps = [_preprocess_args(work), _train_args(work, conf, pick_device(device))]
        _run_fairseq(steps, env=_subprocess_env(threads), log=log, on_line=_progress_parser(progress, conf.max_update),
                     what=f"fairseq-preprocess + fairseq-train for {out_dir}")
        for name in (SUBWORDS, *(f"bin/dict.{lang}.txt" for lang in (SRC, TGT)), "checkpoints/checkpoint_last.pt"):
            os.replace(work / name, out_dir / (CHECKPOINT if name.endswith(".pt") else Path(name).name))
    ModelCard(backend="fairseq", subwords=SUBWORDS, checkpoint=CHECKPOINT,
              checkpoint_sha256=_sha256_file(out_dir / CHECKPOINT),
              meta={"train": conf.model_dump(), "pairs": len(pairs), "src_lang": SRC, "tgt_lang": TGT}
              ).write(out_dir)
    return out_dir


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _write_pieces(sp: SentencePiece, texts: Sequence[str], path: Path) -> None:
    path.write_text("".join(" ".join(p) + "\n" for p in sp.encode(texts)), encoding="utf-8")


def _subprocess_env(threads: int) -> dict[str, str]:
    """The training process' environment: its thread count, unbuffered output, and OpenMP threads that sleep
    rather than spin while they wait (unless set already): on 2 busy cores, spinning made a tiny model's
    2-thread updates 9x slower than with ``OMP_WAIT_POLICY=PASSIVE``."""
    n = str(cpu_threads(threads))
    return {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "PYTHONUNBUFFERED": "1"}


def _preprocess_args(work: Path) -> list[str]:
    return ["fairseq_cli.preprocess", "--source-lang", SRC, "--target-lang", TGT, "--trainpref",
            str(work / "train"), "--destdir", str(work / "bin"), "--joined-dictionary", "--workers", "1"]


def _train_args(work: Path, conf: NMTTrainConf, device: str) -> list[str]:
    """fairseq-train's command line for ``conf``: one checkpoint (checkpoint_last.pt) at the last update."""
    c = conf
    schedule = (["--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(c.warmup_updates)]
                if c.warmup_updates > 0 else ["--lr-scheduler", "fixed"])  # inverse_sqrt divides by it
    return ["fairseq_cli.train", str(work / "bin"), "--task", "translation", "--source-lang", SRC,
            "--target-lang", TGT, "--arch", c.arch,
            "--encoder-layers", str(c.encoder_layers), "--decoder-layers", str(c.decoder_layers),
            "--encoder-embed-dim", str(c.embed_dim), "--decoder-embed-dim", str(c.embed_dim),
            "--encoder-ffn-embed-dim", str(c.ffn_dim), "--decoder-ffn-embed-dim", str(c.ffn_dim),
            "--encoder-attention-heads", str(c.heads), "--decoder-attention-heads", str(c.heads),
            "--share-all-embeddings", "--dropout", str(c.dropout),
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", str(c.label_smoothing),
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(c.lr), *schedule,
            "--max-tokens", str(c.max_tokens), "--max-update", str(c.max_update), "--seed", str(c.seed),
            "--save-dir", str(work / "checkpoints"), "--disable-validation", "--no-epoch-checkpoints",
            "--save-interval", str(10**9), "--no-save-optimizer-state", "--num-workers", "0",
            "--log-format", "simple", "--log-interval", str(max(1, min(100, c.max_update // 50))),
            *(["--cpu"] if device == "cpu" else []), *c.extra_args]


def _progress_parser(progress: Callable[[int, int], None] | None, total: int) -> Callable[[str], None]:
    """A line callback that reports every new ``num_updates`` fairseq logs."""
    last = [-1]

    def on_line(line: str) -> None:
        if progress is not None and (m := _UPDATES.search(line)) and int(m.group(1)) > last[0]:
            last[0] = int(m.group(1))
            progress(last[0], total)

    return on_line


_DRIVER = """import importlib, json, sys
for step in json.loads(sys.argv[1]):
    print("augdag: python -m", " ".join(step), flush=True)
    sys.argv = step
    importlib.import_module(step[0]).cli_main()
"""  # fairseq's CLIs one after the other in one interpreter: importing fairseq takes 10-20 s on 2 busy cores


def _run_fairseq(steps: list[list[str]], *, env: dict[str, str], log: Callable[[str], None], what: str,
                 on_line: Callable[[str], None] | None = None) -> None:
    """Run fairseq CLI modules (``[module, *args]`` each, as ``python -m`` would) in one subprocess of this
    interpreter, streaming its output (stdout and stderr) line by line to ``log``."""
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    cmd = [sys.executable, "-c", _DRIVER, json.dumps(steps)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          env=env, text=True, bufsize=1, errors="replace") as proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            log(line)
            if on_line is not None:
                on_line(line)
    if proc.returncode != 0:
        raise ModelError(f"{what} failed with exit code {proc.returncode}; its last {len(tail)} log lines:\n"
                         + "\n".join(tail))


def _sha256_file(path: Path) -> str:
    from storage.artifacts import hash_file

    return hash_file(path)


# -- loading and trust ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Files:
    """Where a fairseq model's parts are: its directory, checkpoint, card and subword model."""

    directory: Path
    checkpoint: Path
    card: ModelCard | None
    subwords: Path | None


def _locate(model: str | Path) -> _Files:
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
    return _Files(directory, checkpoint, card, subwords)


def _only_checkpoint(directory: Path) -> Path:
    found = sorted(directory.glob("*.pt"))
    if len(found) != 1:
        what = "no *.pt checkpoint" if not found else f"{len(found)} checkpoints ({', '.join(p.name for p in found)})"
        raise ModelError(f"{directory}: {what}; expected one. Hint: name the file, e.g. model: "
                         f"{directory / (found[0].name if found else 'checkpoint_best.pt')}")
    return found[0]


def _trust(files: _Files, sha256: str, trusted: bool) -> bool:
    """Whether the checkpoint may be unpickled, and how: True for weights_only with ``ALLOWED_GLOBALS`` (augdag
    trained it: the card's sha256 matches), False for full unpickling (the user trusts it); else raise."""
    card = files.card
    card_sha = card.checkpoint_sha256 if card is not None and card.checkpoint == files.checkpoint.name else None
    if card_sha is not None and card_sha == sha256:
        return True
    if trusted:
        return False
    why = (f"its sha256 {sha256[:16]}… differs from the {card_sha[:16]}… that {files.directory / CARD} records "
           "(the file was replaced or changed after augdag trained it)" if card_sha is not None
           else f"augdag did not train it (no checkpoint_sha256 in a {CARD} beside it)")
    raise ModelError(f"{files.checkpoint}: refusing to load this fairseq checkpoint: {why}. Loading a fairseq "
                     f"checkpoint unpickles it, which can run arbitrary code. {TRUST_HINT}")


# torch's safe_globals() adds to one process-wide set and, on exit, removes what it added: a second thread
# loading at that moment (the nightly's pipelines load the shared teacher side by side) lost the allow-list
# and failed with "Unsupported global: argparse.Namespace". One allow-listed load at a time.
_SAFE_GLOBALS_LOCK = threading.Lock()


def _unpickle(files: _Files, data: bytes, *, weights_only: bool) -> dict[str, Any]:
    import torch

    try:
        if not weights_only:
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
        with _SAFE_GLOBALS_LOCK, torch.serialization.safe_globals(list(ALLOWED_GLOBALS)):
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


def _fairseq_state(state: dict[str, Any], data_dir: Path) -> dict[str, Any]:
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
    return checkpoint_utils._upgrade_state_dict(state)


class FairseqModel(NMTModel):
    """A fairseq translation model (one checkpoint, its dictionaries, its subword model) on one device."""

    backend = "fairseq"

    def __init__(self, files: _Files, *, model: Any, task: Any, device: str, allow_listed: bool):
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
    def load(cls, model: str | Path, *, trusted: bool = False, device: str = "auto",
             threads: int = 0) -> "FairseqModel":
        """Load (once per process) a fairseq model directory, or the directory around a checkpoint file.

        Args:
            model: The directory (or its ``*.pt`` checkpoint). Without a card, the dictionaries are the
                directory's ``dict.*.txt``, the subword model ``spm.model`` or ``sentencepiece.bpe.model``
                when present, else text is taken as already tokenised (space-separated tokens).
            trusted: Unpickle the checkpoint even though augdag did not train it.
            device: auto, cpu or cuda.
            threads: CPU threads (0: every core).

        Raises:
            ModelError: the checkpoint is not trusted (see the module docstring), or cannot be loaded.
        """
        import torch

        files = _locate(model)
        device = pick_device(device)
        if device == "cpu":
            torch.set_num_threads(cpu_threads(threads))
        return _load_cached(files.checkpoint.resolve(), _stamp(files), trusted, device)

    @classmethod
    def _load_uncached(cls, checkpoint: Path, trusted: bool, device: str) -> "FairseqModel":
        from fairseq import checkpoint_utils

        files = _locate(checkpoint)
        data = checkpoint.read_bytes()  # hashed and unpickled from the same bytes
        allow_listed = _trust(files, hashlib.sha256(data).hexdigest(), trusted)
        state = _fairseq_state(_unpickle(files, data, weights_only=allow_listed), files.directory)
        del data
        try:
            models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], state=state)
        except Exception as e:  # fairseq raises bare exceptions for missing dictionaries, unknown archs, …
            raise ModelError(f"{checkpoint}: fairseq could not build the model: {e}. Hint: the directory needs "
                             "the dictionaries (dict.<lang>.txt) the model was trained with") from e
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
        ok = [i for i, (s, t) in enumerate(zip(s_ids, t_ids))
              if s and t and len(s) + 1 <= max_src and len(t) + 1 <= max_tgt]
        out: list[np.ndarray | None] = [None] * len(src)
        lengths = [max(len(s_ids[i]), len(t_ids[i])) + 1 for i in ok]
        for batch in length_batches(lengths, max_tokens=max_tokens):
            rows = [ok[j] for j in batch]
            for i, logprobs in zip(rows, self._score_batch([s_ids[i] for i in rows], [t_ids[i] for i in rows])):
                out[i] = logprobs
        return out

    def translate(self, src: Sequence[str], options: DecodeOptions = DecodeOptions(), *,
                  max_tokens: int = 4096) -> list[str]:
        """Translations of ``src`` in order: beam search, or one sample per sentence (``options.sampling``,
        seeded with ``options.seed``). An empty sentence translates to ""; a source longer than the
        model's positions is cut to them. ``max_tokens`` counts source tokens per batch."""
        import torch

        max_src = self.max_positions()[0]
        ids = [s[:max_src - 1] for s in self._ids(src, self.src_dict)]
        todo = [i for i, s in enumerate(ids) if s]
        hyps: dict[int, Any] = {}
        generator = self._generator(options)
        with self._seeded(options), torch.inference_mode():
            for batch in length_batches([len(ids[i]) + 1 for i in todo], max_tokens=max_tokens):
                rows = [todo[j] for j in batch]
                tokens, lengths = self._collate_source([ids[i] for i in rows])
                found = generator.generate([self.model], {"net_input": {"src_tokens": tokens, "src_lengths": lengths}})
                hyps.update((i, h[0]["tokens"]) for i, h in zip(rows, found))
        return self._detokenise([hyps.get(i) for i in range(len(src))])

    def fingerprint(self) -> str:
        """A content hash of the checkpoint, the dictionaries and the subword model."""
        from storage.artifacts import hash_inputs

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
        converter = FairseqConverter(str(self.files.checkpoint), str(self.path), source_lang=cfg.source_lang,
                                     target_lang=cfg.target_lang, unsafe_deserialization=not self.allow_listed)
        with self._conversion_guard():
            try:
                converter.convert(str(out_dir), quantization=quantization, force=True)
            except (NotImplementedError, ValueError, RuntimeError) as e:
                raise ModelError(f"{self.files.checkpoint}: CTranslate2 cannot convert this model "
                                 f"(quantization {quantization!r}): {e}") from e
        if self.files.subwords is not None:
            shutil.copyfile(self.files.subwords, out_dir / SUBWORDS)
        ModelCard(backend="ctranslate2", subwords=SUBWORDS if self.files.subwords is not None else None,
                  converted_from="fairseq", source_fingerprint=self.fingerprint(),
                  meta={"quantization": quantization, "source": str(self.files.checkpoint)}).write(out_dir)
        return out_dir

    # -- helpers ------------------------------------------------------------------------------------

    def pieces(self, texts: Sequence[str]) -> list[list[str]]:
        """The tokens the model sees: SentencePiece pieces, or whitespace-separated tokens without one."""
        if self.subwords is None:
            return [t.split() for t in texts]
        return self.subwords.encode([_one_line(t) for t in texts])

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
        prev = data_utils.collate_tokens(rows, d.pad(), d.eos(), left_pad=False,
                                         move_eos_to_beginning=True).to(self.device)
        with torch.inference_mode():
            net_out = self.model(src_tokens, src_lengths, prev)
            logprobs = self.model.get_normalized_probs(net_out, log_probs=True)
            picked = logprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).float().cpu().numpy()
        return [picked[k, :len(r)].copy() for k, r in enumerate(rows)]

    def _generator(self, options: DecodeOptions) -> Any:
        key = dataclasses.replace(options, seed=0)
        if key not in self._generators:
            from fairseq import search
            from fairseq.sequence_generator import SequenceGenerator

            sampling = _bottom_k_sampling() if options.sampling and options.bottom_k and options.bottom_k_steps else None
            strategy = ((sampling or search.Sampling)(self.tgt_dict, sampling_topk=options.topk or -1,
                                                     sampling_topp=options.topp if options.topp < 1 else -1.0)
                        if options.sampling else None)
            if sampling is not None:
                strategy.bottom_k, strategy.bottom_k_steps = options.bottom_k, options.bottom_k_steps
            self._generators[key] = SequenceGenerator(
                [self.model], self.tgt_dict, beam_size=1 if options.sampling else options.beam,
                max_len_a=options.max_len_a, max_len_b=options.max_len_b, len_penalty=options.lenpen,
                temperature=options.temperature, search_strategy=strategy).to(self.device).eval()
        return self._generators[key]

    @contextlib.contextmanager
    def _seeded(self, options: DecodeOptions) -> Iterator[None]:
        """Sampling draws from torch's global generator: seed it, and give the caller's state back after."""
        import torch

        if not options.sampling:
            yield
            return
        devices = [torch.cuda.current_device()] if self.device == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(options.seed)
            yield

    def _detokenise(self, hyps: list[Any]) -> list[str]:
        strings = ["" if h is None else self.tgt_dict.string(h.cpu()) for h in hyps]
        if self.subwords is None:
            return strings
        return self.subwords.decode([s.split() for s in strings])

    @contextlib.contextmanager
    def _conversion_guard(self) -> Iterator[None]:
        """For augdag's own checkpoint: the file still has the hash it was loaded with, and the converter's
        ``torch.load(weights_only=True)`` sees the same allow-list."""
        import torch

        if not self.allow_listed:
            yield
            return
        sha = _sha256_file(self.files.checkpoint)
        _trust(self.files, sha, trusted=False)
        with torch.serialization.safe_globals(list(ALLOWED_GLOBALS)):
            yield


def _check_conversion_target(out_dir: Path) -> None:
    """CTranslate2's converter removes its output directory first: only a new, empty or converted one."""
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    card = ModelCard.read(out_dir)
    if card is None or card.backend != "ctranslate2":
        raise ModelError(f"{out_dir}: not empty and not a CTranslate2 model augdag converted; converting there "
                         "would delete its files. Hint: convert into a new directory")


def _stamp(files: _Files) -> tuple[Any, ...]:
    """What invalidates a cached model: the checkpoint's or the card's file changing."""
    card = files.directory / CARD
    stats = [files.checkpoint.stat(), card.stat() if card.is_file() else None]
    return tuple((s.st_size, s.st_mtime_ns, s.st_ino) if s is not None else None for s in stats)


@functools.lru_cache(maxsize=4)
def _load_cached(checkpoint: Path, stamp: tuple[Any, ...], trusted: bool, device: str) -> FairseqModel:
    del stamp  # part of the cache key only
    return FairseqModel._load_uncached(checkpoint, trusted, device)


@functools.lru_cache(maxsize=1)
def _bottom_k_sampling() -> type:
    """fairseq's ``search.Sampling`` with PCC's bottom-k (Eq. 2): for the first ``bottom_k_steps`` steps the
    ``bottom_k`` most probable tokens are removed and the rest renormalised, then top-k / top-p as usual.
    The twin of ``models.generation.BottomKLogitsProcessor`` for fairseq's ``SequenceGenerator``."""
    import torch
    from fairseq import search

    class BottomKSampling(search.Sampling):
        bottom_k, bottom_k_steps = 0, 0

        def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
            if step < self.bottom_k_steps and self.bottom_k > 0:
                finite = torch.isfinite(lprobs).sum(-1, keepdim=True)
                top = lprobs.topk(self.bottom_k, dim=-1).indices
                masked = lprobs.scatter(-1, top, float("-inf"))
                # a row with no more than k allowed tokens (EOS/pad already barred) is left as it is
                lprobs = torch.where(finite > self.bottom_k, masked, lprobs)
                lprobs = lprobs - torch.logsumexp(lprobs, dim=-1, keepdim=True)
            return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs)

    return BottomKSampling

