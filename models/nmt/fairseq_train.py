"""Training a fairseq transformer: fairseq's own CLIs in a subprocess, a loadable model directory out.

Training is fairseq's own CLIs, ``fairseq_cli.preprocess`` (one joined dictionary) then
``fairseq_cli.train``, run one after the other in one subprocess of this interpreter (so the venv's
fairseq runs, and fairseq is imported once: that import alone takes 10-20 s on 2 busy cores).
Hand-written: the command lines built from ``NMTTrainConf``, the joint SentencePiece model around them,
and the log streaming (each line to ``log``, the update count to ``progress``): fairseq's CLIs only print.
The directory written is what ``models.nmt.fairseq.FairseqModel.load`` reads; its card's sha256 is what
makes the checkpoint trusted (``models.nmt.fairseq_checkpoint``).
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from conf.errors import ModelError
from conf.schema import NMTTrainConf
from models.nmt.base import CARD, ModelCard, check_pairs, cpu_threads, pick_device
from models.nmt.fairseq_checkpoint import CHECKPOINT, SUBWORDS
from models.nmt.subwords import SentencePiece, one_line, train_sentencepiece
from storage.artifacts import hash_file

SRC, TGT = "src", "tgt"  # the language names of the models augdag trains (dict.src.txt, dict.tgt.txt)
LOG_TAIL = 20  # log lines quoted when a fairseq command fails
_UPDATES = re.compile(r"num_updates[ =|]+(\d+)")


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
    pairs = [(s, t) for s, t in zip(map(one_line, src), map(one_line, tgt)) if s and t]
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
        steps = [_preprocess_args(work), train_args(work, conf, pick_device(device))]
        run_fairseq(steps, env=_subprocess_env(threads), log=log, on_line=progress_parser(progress, conf.max_update),
                    what=f"fairseq-preprocess + fairseq-train for {out_dir}")
        for name in (SUBWORDS, *(f"bin/dict.{lang}.txt" for lang in (SRC, TGT)), "checkpoints/checkpoint_last.pt"):
            os.replace(work / name, out_dir / (CHECKPOINT if name.endswith(".pt") else Path(name).name))
    ModelCard(backend="fairseq", subwords=SUBWORDS, checkpoint=CHECKPOINT,
              checkpoint_sha256=hash_file(out_dir / CHECKPOINT),
              meta={"train": conf.model_dump(), "pairs": len(pairs), "src_lang": SRC, "tgt_lang": TGT}
              ).write(out_dir)
    return out_dir


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


def train_args(work: Path, conf: NMTTrainConf, device: str) -> list[str]:
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


def progress_parser(progress: Callable[[int, int], None] | None, total: int) -> Callable[[str], None]:
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


def run_fairseq(steps: list[list[str]], *, env: dict[str, str], log: Callable[[str], None], what: str,
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
