"""NMT stages shared by rejuvenation, self-training and the student: score pairs, translate a column, train.

Models reach a stage as ``resources`` (their paths and ``runtime``: device, threads, batch size, trust —
how it runs, not fingerprinted, so moving a run to a GPU recomputes nothing) plus ``model``, what changes
the numbers (backend, compute type: fingerprinted with the stage's parameters); the flow adds the model's
fingerprint with ``models=``. One model is loaded per process and reused by every shard (``load``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NotRequired

import numpy as np
import pyarrow as pa
from pydantic import ConfigDict
from typing_extensions import (
    TypedDict,  # pydantic validates typing.TypedDict only from Python 3.12
)

from conf.errors import InputError
from conf.schema import NMTConf
from models.nmt import DecodeOptions, NMTModel, load_model
from models.runtime import loaded
from storage.parts import Parts
from storage.schemas import with_uid
from tasks.runtime.stage import Stage

NMT_VERSION = "1"
SCORES = pa.schema(
    [
        ("uid", pa.string()),
        ("tokens", pa.int32()),
        ("logprob", pa.float64()),
        ("cross_entropy", pa.float64()),
        ("prob", pa.float64()),
    ]
)


class Loading(TypedDict):
    """What of a model's loading changes its outputs (a stage parameter, hence in the fingerprint)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    backend: str
    compute_type: str
    src_lang: str | None
    tgt_lang: str | None


class Runtime(TypedDict):
    """How a model runs (a stage resource, not fingerprinted)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    trusted: bool
    device: str
    threads: int
    max_tokens: int


class Decode(TypedDict):
    """Beam search settings of a translation stage (``models.nmt.DecodeOptions`` takes them): beam, length penalty,
    seed, and the output's bound, max_len_a · |source subwords| + max_len_b tokens (left out: DecodeOptions')."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]
    beam: int
    lenpen: float
    seed: int
    max_len_a: NotRequired[float]
    max_len_b: NotRequired[int]


def loading(conf: NMTConf) -> Loading:
    """The ``Loading`` of a model section."""
    return {
        "backend": "ctranslate2" if conf.inference == "ctranslate2" else conf.backend,
        "compute_type": conf.compute_type,
        "src_lang": conf.src_lang,
        "tgt_lang": conf.tgt_lang,
    }


def runtime(conf: NMTConf) -> Runtime:
    """The ``Runtime`` of a model section."""
    return {"trusted": conf.trusted, "device": conf.device, "threads": conf.threads, "max_tokens": conf.max_tokens}


def _load(
    path: str,
    backend: str,
    trusted: bool,
    device: str,
    threads: int,
    compute_type: str,
    src_lang: str | None,
    tgt_lang: str | None,
) -> NMTModel:
    return load_model(
        path,
        backend=backend,
        trusted=trusted,
        device=device,
        threads=threads,
        compute_type=compute_type,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
    )


_cached = loaded(_load)  # once per process and argument tuple, under the process-wide loading lock


def load(path: Path | str, model: Loading, run: Runtime) -> NMTModel:
    """The model at ``path`` as ``loading`` and ``runtime`` say, loaded once per process."""
    return _cached(
        str(path),
        model["backend"],
        run["trusted"],
        run["device"],
        run["threads"],
        model["compute_type"],
        model.get("src_lang"),
        model.get("tgt_lang"),
    )


def sentence_probabilities(uids: pa.Array | pa.ChunkedArray, logprobs: Sequence[np.ndarray | None]) -> pa.Table:
    """Per pair: target tokens (EOS included), the sum of their log-probabilities, the cross-entropy
    −mean and the probability exp(mean) (thesis ch. 5: the length-normalised sentence probability).
    A pair the model could not score has nulls in all four columns, never a made-up number."""
    n = len(logprobs)
    tokens = np.zeros(n, np.int32)
    total = np.zeros(n, np.float64)
    scored = np.zeros(n, bool)
    for i, lp in enumerate(logprobs):
        if lp is not None and len(lp):
            tokens[i], total[i], scored[i] = len(lp), float(np.sum(lp, dtype=np.float64)), True
    mask = ~scored
    mean = np.divide(total, tokens, out=np.zeros(n), where=scored)

    def col(values: np.ndarray, t: pa.DataType) -> pa.Array:
        return pa.array(values, t, mask=mask)

    return pa.table(
        {
            "uid": uids,
            "tokens": col(tokens, pa.int32()),
            "logprob": col(total, pa.float64()),
            "cross_entropy": col(-mean, pa.float64()),
            "prob": col(np.exp(mean), pa.float64()),
        },
        schema=SCORES,
    )


def score_pairs(
    rows: pa.Table, *, src: str = "src", tgt: str = "tgt", model: Loading, model_path: Path, runtime: Runtime
) -> pa.Table:
    """Force-decode every pair of the shard: ``sentence_probabilities`` of (``src`` → ``tgt``)."""
    nmt = load(model_path, model, runtime)
    logprobs = nmt.score(rows[src].to_pylist(), rows[tgt].to_pylist(), max_tokens=runtime["max_tokens"])
    return sentence_probabilities(rows["uid"], logprobs)


def decode_options(*, beam: int, lenpen: float, seed: int = 0, bound: NMTConf | None = None) -> Decode:
    """The ``Decode`` options of a translation stage: beam size, length penalty and seed, and the output's
    bound (``max_len_a``, ``max_len_b``) of the model section ``bound`` (None: ``DecodeOptions``' defaults)."""
    decode: Decode = {"beam": beam, "lenpen": lenpen, "seed": seed}
    if bound is not None:
        decode.update(max_len_a=bound.max_len_a, max_len_b=bound.max_len_b)
    return decode


def translate_column(
    texts: pa.Array | pa.ChunkedArray, *, model: Loading, model_path: Path, runtime: Runtime, decode: Decode
) -> pa.Array:
    """Translations of ``texts`` (beam search as ``decode`` says, bounded by its max_len_a and max_len_b), one per
    row, in order; the sentences done show as the shard's progress, and a stop requested ends it between batches
    (``tasks.runtime.progress.sentences``)."""
    from tasks.runtime.progress import sentences

    nmt = load(model_path, model, runtime)
    src = texts.to_pylist()
    out = nmt.translate(src, DecodeOptions(**decode), max_tokens=runtime["max_tokens"], progress=sentences(len(src)))
    return pa.array(out, pa.string())


def translate_mono(
    rows: pa.Table, *, model: Loading, model_path: Path, runtime: Runtime, decode: Decode, model_fingerprint: str
) -> pa.Table:
    """The teacher's step (ch. 6): each monolingual sentence and its translation as a synthetic pair,
    with ``parent_uid`` (the sentence's uid) and the teacher's fingerprint as lineage; a sentence of a split
    line keeps its ``sentence`` (after ``line``)."""
    pairs = pa.table(
        {
            "uid": rows["uid"],
            "src": rows["text"],
            "tgt": translate_column(rows["text"], model=model, model_path=model_path, runtime=runtime, decode=decode),
            "source": rows["source"],
            "line": rows["line"],
        }
    )
    pairs = with_uid(pairs, "bitext")
    if "sentence" in rows.column_names:
        pairs = pairs.add_column(pairs.schema.get_field_index("line") + 1, rows.schema.field("sentence"), rows["sentence"])
    return pairs.append_column("parent_uid", rows["uid"]).append_column(
        "model", pa.repeat(pa.scalar(model_fingerprint), rows.num_rows)
    )


def fairseq_builder(
    parts: Parts, conf: NMTConf, *, src: str = "src", tgt: str = "tgt", label: str = "nmt"
) -> Callable[[Path], None]:
    """A ``build(path)`` for ``run_model_stage``: fairseq-train on (``src`` → ``tgt``) of an artifact's
    parts, streamed a part at a time (one part's two columns as Python lists in memory, never the whole
    artifact's); its log goes to ``training_log`` and its updates to the progress bar ``train <label>``."""

    def build(path: Path) -> None:
        from models.nmt.fairseq import train_fairseq_batches
        from tasks.runtime.progress import report

        train_fairseq_batches(
            part_batches(parts, src, tgt),
            path,
            conf.train,
            log=training_log(),
            progress=lambda done, total: report(f"train {label}", done, total),
            threads=conf.threads,
            device=conf.device,
        )

    return build


def part_batches(parts: Parts, src: str = "src", tgt: str = "tgt") -> Callable[[], Iterator[tuple[list, list]]]:
    """The ``batches`` of ``train_fairseq_batches``: each part's two columns as Python lists, a part at a time
    (a callable: training reads them more than once)."""

    def batches() -> Iterator[tuple[list[str], list[str]]]:
        if not parts:
            raise InputError("nothing to read: the input artifact has no parts")
        for table in parts.tables([src, tgt]):
            yield table[src].to_pylist(), table[tgt].to_pylist()

    return batches


def training_log() -> Callable[[str], None]:
    """Where fairseq's training output goes, a line at a time: the logger ``augdag.fairseq`` at INFO, each
    record naming the Prefect task run it came from as Prefect's own records do (a model's training is the
    run 'fairseq' of the task 'student'). So it reaches the run's log file (flows/engine/run_log.py; `augdag logs
    RUN --stage student`) and, with `augdag -v`, the terminal, but not Prefect's API: one training's ~300
    lines would fill the UI's log and the server's database. Outside a task run the records name none."""
    logger = logging.getLogger("augdag.fairseq")
    extra: dict[str, str] = {}
    try:
        from prefect.context import TaskRunContext

        if (ctx := TaskRunContext.get()) is not None:
            extra = {"task_run_name": ctx.task_run.name, "task_name": ctx.task.name}
    except Exception:  # noqa: BLE001 — the log names no task run rather than failing a training
        pass
    return lambda line: logger.info("%s", line, extra=extra)


# 2: the output's bound per length chunk with CTranslate2 (it was the whole shard's longest source), and settable
TRANSLATE_MONO = Stage("teacher_translate", "2", translate_mono, tags=("gpu",))
