"""Training a fairseq transformer: fairseq's own CLIs in a process of their own, a loadable model directory out.

Training is fairseq's own CLIs, ``fairseq_cli.preprocess`` (one joined dictionary) then
``fairseq_cli.train``, run one after the other in a fork of a warm process of this interpreter
(``models.nmt.fairseq_zygote``: the venv's fairseq runs, imported once per augdag process; that import alone
takes 10-20 s on 2 busy cores).
Hand-written: the command lines built from ``NMTTrainConf``, the joint SentencePiece model around them,
and the log streaming (each line to ``log``, the update count to ``progress``): fairseq's CLIs only print.
The training pairs are streamed batch by batch (``train_fairseq_batches``; the training stage hands it one
artifact part at a time): SentencePiece pulls its first 2M sentences from one pass, the pieces are written to
``train.src``/``train.tgt`` a chunk at a time in another, so the corpus is never one list or one string in
memory (at 4.5M pairs that was several GB). ``train_fairseq`` (two lists) is the same in one-list batches.
Continued training (``init``) restarts fairseq-train from a model augdag trained (``--restore-file``,
optimizer, lr scheduler, data order and meters reset) with that model's subwords and dictionary; fairseq's
own ``torch.load`` of it runs in that process with ``weights_only`` and augdag's allow-list.
The directory written is what ``models.nmt.fairseq.FairseqModel.load`` reads; its card's sha256 is what
makes the checkpoint trusted (``models.nmt.fairseq_checkpoint``).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from conf.errors import ModelError
from conf.schema import NMTTrainConf
from models.nmt.base import CARD, ModelCard, check_pairs, cpu_threads, pick_device
from models.nmt.fairseq_checkpoint import ALLOWED_GLOBALS, CHECKPOINT, SUBWORDS, locate, trust
from models.nmt.fairseq_zygote import LOG_TAIL, training_env, zygote
from models.nmt.subwords import SentencePiece, one_line, train_sentencepiece
from storage.artifacts import hash_file

SRC, TGT = "src", "tgt"  # the language names of the models augdag trains (dict.src.txt, dict.tgt.txt)
INIT, INIT_DICT = "init.pt", "init.dict.txt"  # continued training: the first model's checkpoint and dictionary
_UPDATES = re.compile(r"num_updates[ =|]+(\d+)")


Batches = Callable[[], Iterable[tuple[Sequence[str], Sequence[str]]]]
"""Training pairs as batches of (sources, targets), one target per source: a callable, since training
iterates them more than once (each call must iterate the same batches afresh, in the same order)."""
LIST_BATCH = 100_000  # pairs per batch when train_fairseq is handed two whole lists
PIECES_CHUNK = 10_000  # pairs encoded and written to train.src/train.tgt at a time


def train_fairseq(
    src: Sequence[str],
    tgt: Sequence[str],
    out_dir: Path,
    conf: NMTTrainConf,
    *,
    init: Path | None = None,
    log: Callable[[str], None] = print,
    progress: Callable[[int, int], None] | None = None,
    threads: int = 0,
    device: str = "auto",
) -> Path:
    """Train a fairseq transformer on the pairs (src[i], tgt[i]) and write a loadable model directory:
    ``train_fairseq_batches`` on slices of ``LIST_BATCH`` pairs (the same model as one batch of all of them).

    Args:
        src: Source sentences (plain text).
        tgt: Their translations; pairs with an empty side are left out (``meta.pairs`` counts the rest).
        out_dir, conf, init, log, progress, threads, device: as ``train_fairseq_batches``.

    Raises:
        ModelError: ``src`` and ``tgt`` differ in length, or as ``train_fairseq_batches``.
    """
    check_pairs(src, tgt)
    return train_fairseq_batches(
        lambda: ((src[i : i + LIST_BATCH], tgt[i : i + LIST_BATCH]) for i in range(0, len(src), LIST_BATCH)),
        out_dir,
        conf,
        init=init,
        log=log,
        progress=progress,
        threads=threads,
        device=device,
    )


def train_fairseq_batches(
    batches: Batches,
    out_dir: Path,
    conf: NMTTrainConf,
    *,
    init: Path | None = None,
    log: Callable[[str], None] = print,
    progress: Callable[[int, int], None] | None = None,
    threads: int = 0,
    device: str = "auto",
) -> Path:
    """Train a fairseq transformer on the pairs of ``batches`` and write a loadable model directory.

    A joint SentencePiece BPE model (``conf.vocab_size``) turns both sides into pieces; fairseq builds one
    joined dictionary and trains ``conf.max_update`` updates without validation. ``out_dir`` ends up
    holding ``checkpoint.pt`` (no optimizer state), ``dict.src.txt``, ``dict.tgt.txt``, ``spm.model`` and
    the card, written last, whose sha256 makes the checkpoint trusted; work files live in a temporary
    directory beside ``out_dir`` and are removed. The pairs are never all in memory: ``batches()`` is
    iterated up to three times (up to the first pair with both sides non-empty; SentencePiece's first 2M
    sentences, source then target pair by pair; every pair, written as pieces batch by batch), so how the
    pairs are cut into batches changes nothing in the model.

    Args:
        batches: The pairs, as ``Batches`` (sources and their translations, plain text); pairs with an
            empty side are left out (``meta.pairs`` counts the rest).
        out_dir: The model directory to write (created; existing files of the same names are replaced).
        conf: Architecture, sizes and optimisation (``extra_args`` go to fairseq-train verbatim).
        init: Continued training: a model directory augdag trained (its card's sha256 must match). Its
            checkpoint's weights are the start (fairseq's ``--restore-file`` with ``--reset-optimizer
            --reset-lr-scheduler --reset-dataloader --reset-meters``: ``conf.lr``, ``warmup_updates`` and
            ``max_update`` apply afresh), its SentencePiece model and dictionary are reused and copied to
            ``out_dir`` (``conf.vocab_size`` is not used); ``conf``'s sizes must be the model's.
        log: Receives fairseq's output, one line at a time.
        progress: Called with (updates done, ``conf.max_update``) as fairseq reports them.
        threads: CPU threads of the training process (0: every core).
        device: auto, cpu or cuda (``pick_device``).

    Returns:
        ``out_dir``.

    Raises:
        ModelError: no pairs, a batch with more sources than targets or fewer, ``init`` is not a model augdag
            trained, or a fairseq command failed (the message quotes its last log lines).
    """
    out_dir = Path(out_dir)
    _check_some_pair(batches, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CARD).unlink(missing_ok=True)  # the card comes last: a directory without one is unfinished
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.fairseq-work-", dir=out_dir.parent) as work:
        work = Path(work)
        init_sha = None if init is None else initial_model(init, work)  # its checkpoint, subwords and dictionary
        if init is None:
            train_sentencepiece(
                (s for pairs in _pairs(batches) for p in pairs for s in p), work / SUBWORDS, vocab_size=conf.vocab_size
            )
        pairs = _write_pieces(SentencePiece(work / SUBWORDS), batches, work)
        steps = [
            _preprocess_args(work, srcdict=None if init is None else work / INIT_DICT),
            train_args(work, conf, pick_device(device)) + ([] if init is None else restore_args(work / INIT)),
        ]
        run_fairseq(
            steps,
            env=training_env(threads),
            log=log,
            on_line=progress_parser(progress, conf.max_update),
            what=f"fairseq-preprocess + fairseq-train for {out_dir}",
            allow_listed=init is not None,
        )
        for name in (SUBWORDS, *(f"bin/dict.{lang}.txt" for lang in (SRC, TGT)), "checkpoints/checkpoint_last.pt"):
            os.replace(work / name, out_dir / (CHECKPOINT if name.endswith(".pt") else Path(name).name))
    ModelCard(
        backend="fairseq",
        subwords=SUBWORDS,
        checkpoint=CHECKPOINT,
        checkpoint_sha256=hash_file(out_dir / CHECKPOINT),
        meta={
            "train": conf.model_dump(),
            "pairs": pairs,
            "src_lang": SRC,
            "tgt_lang": TGT,
            **({"init": {"checkpoint_sha256": init_sha}} if init_sha else {}),
        },
    ).write(out_dir)
    return out_dir


def _pairs(batches: Batches) -> Iterator[list[tuple[str, str]]]:
    """Each batch's pairs as ``one_line`` texts, those with an empty side left out."""
    for src, tgt in batches():
        check_pairs(src, tgt)
        yield [(s, t) for s, t in zip(map(one_line, src), map(one_line, tgt)) if s and t]


def _check_some_pair(batches: Batches, out_dir: Path) -> None:
    """A ModelError unless some pair has both sides non-empty (read up to the first such one)."""
    given = 0
    for src, tgt in batches():
        check_pairs(src, tgt)
        if any(one_line(s) and one_line(t) for s, t in zip(src, tgt)):
            return
        given += len(src)
    raise ModelError(f"{out_dir}: no pair with both sides non-empty to train on ({given} given)")


def _write_pieces(sp: SentencePiece, batches: Batches, work: Path) -> int:
    """Both sides' pieces, one sentence a line, appended to ``work``'s train.src and train.tgt batch by batch
    (``PIECES_CHUNK`` pairs at a time); the number of pairs written."""
    written = 0
    with (
        (work / f"train.{SRC}").open("w", encoding="utf-8") as src_file,
        (work / f"train.{TGT}").open("w", encoding="utf-8") as tgt_file,
    ):
        for pairs in _pairs(batches):
            for i in range(0, len(pairs), PIECES_CHUNK):
                chunk = pairs[i : i + PIECES_CHUNK]
                for side, file in ((0, src_file), (1, tgt_file)):
                    file.write("".join(" ".join(p) + "\n" for p in sp.encode([pair[side] for pair in chunk])))
            written += len(pairs)
    return written


def initial_model(init: Path, work: Path) -> str:
    """Copy the model continued training starts from into ``work`` (``INIT``, its subword model and joined
    dictionary ``INIT_DICT``) and return its checkpoint's sha256. Only a model augdag trained (the card's
    sha256 matches the copied bytes, the ones fairseq-train unpickles allow-listed)."""
    files = locate(init)
    if files.subwords is None or not (files.directory / f"dict.{SRC}.txt").is_file():
        raise ModelError(
            f"{files.directory}: continued training needs the first model's subword model ({SUBWORDS}) "
            f"and dictionary (dict.{SRC}.txt) beside its checkpoint"
        )
    shutil.copyfile(files.checkpoint, work / INIT)
    sha256 = hash_file(work / INIT)
    trust(files, sha256, trusted=False)
    shutil.copyfile(files.subwords, work / SUBWORDS)
    shutil.copyfile(files.directory / f"dict.{SRC}.txt", work / INIT_DICT)
    return sha256


def restore_args(checkpoint: Path) -> list[str]:
    """fairseq-train's options to start from the checkpoint's weights with a fresh optimizer, lr schedule and
    data order."""
    return [
        "--restore-file",
        str(checkpoint.absolute()),
        "--reset-optimizer",
        "--reset-lr-scheduler",
        "--reset-dataloader",
        "--reset-meters",
    ]


def warm_up() -> None:
    """Start this process' warm fairseq process now (fairseq's import, 5-10 s, overlapping with the caller's own
    start-up rather than delaying the first training), in the environment a training gives it
    (``training_env``: OpenMP's wait policy is read when the process loads it)."""
    zygote().start(training_env(0))


def _preprocess_args(work: Path, srcdict: Path | None = None) -> list[str]:
    return [
        "fairseq_cli.preprocess",
        "--source-lang",
        SRC,
        "--target-lang",
        TGT,
        "--trainpref",
        str(work / "train"),
        "--destdir",
        str(work / "bin"),
        "--joined-dictionary",
        "--workers",
        "1",
        *(["--srcdict", str(srcdict)] if srcdict is not None else []),
    ]


def train_args(work: Path, conf: NMTTrainConf, device: str) -> list[str]:
    """fairseq-train's command line for ``conf``: one checkpoint (checkpoint_last.pt) at the last update."""
    c = conf
    schedule = (
        ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(c.warmup_updates)]
        if c.warmup_updates > 0
        else ["--lr-scheduler", "fixed"]
    )  # inverse_sqrt divides by it
    return [
        "fairseq_cli.train",
        str(work / "bin"),
        "--task",
        "translation",
        "--source-lang",
        SRC,
        "--target-lang",
        TGT,
        "--arch",
        c.arch,
        "--encoder-layers",
        str(c.encoder_layers),
        "--decoder-layers",
        str(c.decoder_layers),
        "--encoder-embed-dim",
        str(c.embed_dim),
        "--decoder-embed-dim",
        str(c.embed_dim),
        "--encoder-ffn-embed-dim",
        str(c.ffn_dim),
        "--decoder-ffn-embed-dim",
        str(c.ffn_dim),
        "--encoder-attention-heads",
        str(c.heads),
        "--decoder-attention-heads",
        str(c.heads),
        "--share-all-embeddings",
        "--dropout",
        str(c.dropout),
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        str(c.label_smoothing),
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        str(c.lr),
        *schedule,
        "--max-tokens",
        str(c.max_tokens),
        "--max-update",
        str(c.max_update),
        "--seed",
        str(c.seed),
        "--save-dir",
        str(work / "checkpoints"),
        "--disable-validation",
        "--no-epoch-checkpoints",
        "--save-interval",
        str(10**9),
        "--no-save-optimizer-state",
        "--num-workers",
        "0",
        "--log-format",
        "simple",
        "--log-interval",
        str(max(1, min(100, c.max_update // 50))),
        *(["--cpu"] if device == "cpu" else []),
        *c.extra_args,
    ]


def progress_parser(progress: Callable[[int, int], None] | None, total: int) -> Callable[[str], None]:
    """A line callback that reports every new ``num_updates`` fairseq logs."""
    last = [-1]

    def on_line(line: str) -> None:
        if progress is not None and (m := _UPDATES.search(line)) and int(m.group(1)) > last[0]:
            last[0] = int(m.group(1))
            progress(last[0], total)

    return on_line


def run_fairseq(
    steps: list[list[str]],
    *,
    env: dict[str, str],
    log: Callable[[str], None],
    what: str,
    on_line: Callable[[str], None] | None = None,
    allow_listed: bool = False,
) -> None:
    """Run fairseq CLI modules (``[module, *args]`` each, as ``python -m`` would) one after the other in a fork
    of the warm fairseq process (``models.nmt.fairseq_zygote``), its output (stdout and stderr) line by line to
    ``log``. ``allow_listed``: torch
    unpickles checkpoints there with ``ALLOWED_GLOBALS`` (only for checkpoints whose trust was checked)."""
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
    allowed = [[g.__module__, g.__qualname__] for g in ALLOWED_GLOBALS] if allow_listed else []
    threads = cpu_threads(int(env.get("OMP_NUM_THREADS", "0") or 0))

    def each(line: str) -> None:
        tail.append(line)
        log(line)
        if on_line is not None:
            on_line(line)

    code = zygote().run(steps, env=env, threads=threads, allowed=allowed, on_line=each)
    if code != 0:
        how = "ended without an exit code (killed?)" if code is None else f"failed with exit code {code}"
        raise ModelError(f"{what} {how}; its last {len(tail)} log lines:\n" + "\n".join(tail))
