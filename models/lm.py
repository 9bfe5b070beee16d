"""N-gram language models with KenLM: train with ``lmplz``, score with the ``kenlm`` module, filter by score.

    log10 P(s) = Σ_{i=1}^{|s|+1} log10 P(w_i | w_{i-n+1} … w_{i-1}),   w_0 = <s>, w_{|s|+1} = </s>
    H(s) = −ln P(s) / (|s| + 1)   (nats per token),   PPL(s) = 10^(−log10 P(s) / (|s| + 1))

Training is modified Kneser-Ney (``lmplz``'s only smoothing). ``lmplz`` comes from no registry: ``make
install`` builds it into ``.venv/bin`` (``scripts/build_kenlm.sh``). Tokens are runs of non-whitespace, as
``kenlm.Model.score`` splits them (ASCII whitespace: space, \\t \\n \\v \\f \\r).

The filter that drops the worst share of a corpus by these scores is a stage: ``tasks.common.lm``.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import kenlm
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ModelError
from storage.artifacts import commit_file, hash_file, temp_path

log = logging.getLogger(__name__)

SCORES = pa.schema(
    [("log10_prob", pa.float64()), ("tokens", pa.int64()), ("cross_entropy", pa.float64()), ("perplexity", pa.float64())]
)
LMPLZ_HINT = "Hint: `make kenlm` (or scripts/build_kenlm.sh .venv/bin), or set AUGDAG_LMPLZ to an lmplz binary"
_NOT_QUERY_SPACE = r"[\x00\t\n\r\v\f]"  # lmplz splits words on \0 \t \n \r space only; kenlm queries on all
_LN10 = math.log(10.0)
MAX_ORDER = 6  # the pip kenlm module (and our build_binary) load models up to this order; lmplz would write more

Texts = Iterable[str] | pa.Array | pa.ChunkedArray


def find_lmplz() -> Path:
    """``$AUGDAG_LMPLZ``, else ``lmplz`` next to ``sys.executable`` (``.venv/bin``), else on ``PATH``."""
    return _find_tool("lmplz")


def _find_tool(name: str) -> Path:
    if env := os.environ.get("AUGDAG_LMPLZ"):
        tool = Path(env) if name == "lmplz" else Path(env).with_name(name)
        if tool.is_file() and os.access(tool, os.X_OK):
            return tool
        raise ModelError(f"AUGDAG_LMPLZ={env}: expected an executable {name}, found none at {tool}. {LMPLZ_HINT}")
    beside = Path(sys.executable).parent / name  # not resolved: the venv's bin, not the base interpreter's
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    if found := shutil.which(name):
        return Path(found)
    raise ModelError(
        f"{name}: not found beside the interpreter ({beside.parent}) nor on PATH, and AUGDAG_LMPLZ is "
        f"unset (KenLM's trainer is on no registry). {LMPLZ_HINT}"
    )


def train_arpa(
    texts: Texts,
    path: Path,
    *,
    order: int = 5,
    memory: str = "20%",
    discount_fallback: bool | None = None,
    prune: Sequence[int] | None = None,
    binary: bool = False,
    tmp_dir: Path | None = None,
) -> Path:
    """Train a modified Kneser-Ney ``order``-gram LM on ``texts`` (one sentence each) and write it as ARPA.

    The corpus is streamed to ``lmplz``'s stdin; null rows are skipped and \\0 \\t \\n \\r \\v \\f become
    spaces, so a row stays one sentence and is split into the same words ``NgramLM.score`` sees.

    Args:
        texts: sentences, one per row.
        path: the ARPA file to write; written under a temporary name and renamed when complete.
        order: n of the n-gram model (``-o``), 1 to ``MAX_ORDER`` = 6 (what the kenlm module loads).
        memory: ``lmplz``'s sorting memory (``-S``), GNU-sort syntax: ``"20%"``, ``"2G"``.
        discount_fallback: modified KN discounts D1, D2, D3+ come from counts-of-counts, which tiny or
            artificial corpora lack (``BadDiscountException``). True: use lmplz's fallback (0.5, 1, 1.5) for
            the orders where that happens; False: fail instead; None: as True, with a logged warning naming
            the orders. (This is the result a retry after the exception would give, in one pass.)
        prune: count thresholds per order (``--prune``), non-decreasing, first 0: ``(0, 0, 1)`` drops
            singleton 3-grams and above.
        binary: also write KenLM's probing binary to ``path.with_suffix(".binary")`` (faster to load).
        tmp_dir: where ``lmplz`` sorts on disk (``-T``); default a temporary directory beside ``path``.

    Returns:
        ``path``.

    Raises:
        ModelError: no ``lmplz``, bad ``prune``, or ``lmplz`` failed (its stderr's tail in the message).
    """
    path = Path(path)
    if not 1 <= order <= MAX_ORDER:
        raise ModelError(
            f"train_arpa: order = {order}, must be in [1, {MAX_ORDER}]: the kenlm module (KENLM_MAX_ORDER="
            f"{MAX_ORDER}) cannot load a higher order"
        )
    if prune is not None and (not prune or prune[0] != 0 or any(a > b for a, b in itertools.pairwise(prune))):
        raise ModelError(
            f"train_arpa: prune = {list(prune)}: expected non-decreasing thresholds starting "
            "with 0 (lmplz does not prune unigrams), e.g. (0, 0, 1)"
        )
    lmplz = find_lmplz()
    path.parent.mkdir(parents=True, exist_ok=True)
    arpa_tmp = temp_path(path)
    with tempfile.TemporaryDirectory(prefix=".lmplz-", dir=tmp_dir or path.parent) as work:
        cmd = [str(lmplz), "-o", str(order), "-S", memory, "-T", work + "/", "--arpa", str(arpa_tmp)]
        if discount_fallback is not False:
            cmd.append("--discount_fallback")
        if prune is not None:
            cmd += ["--prune", *map(str, prune)]
        stderr_path = Path(work) / "lmplz.stderr"
        try:
            with open(stderr_path, "wb") as stderr:  # a file, not a pipe: lmplz's progress cannot block it
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr)
                try:
                    for chunk in _corpus_chunks(texts):
                        proc.stdin.write(chunk)
                    proc.stdin.close()
                except BrokenPipeError:  # lmplz died early; its stderr says why
                    pass
                rc = proc.wait()
            err = stderr_path.read_text(errors="replace")
            if rc != 0:
                hint = (
                    "\nHint: discount_fallback=None or True for a tiny or artificial corpus"
                    if "BadDiscountException" in err
                    else ""
                )
                raise ModelError(f"{path}: lmplz -o {order} failed (exit {rc}):\n{_tail(err)}{hint}")
            fallback = [int(m) + 1 for m in re.findall(r"Substituting fallback discounts for order (\d+)", err)]
            if discount_fallback is None and fallback:
                log.warning(
                    "%s: too few distinct counts to estimate modified Kneser-Ney discounts for the "
                    "%s-grams; lmplz used its fallback D1=0.5 D2=1 D3+=1.5 there (a tiny or "
                    "artificial corpus?)",
                    path,
                    ", ".join(map(str, fallback)),
                )
            commit_file(arpa_tmp, path)
        finally:
            arpa_tmp.unlink(missing_ok=True)
    if binary:
        build_binary(path, path.with_suffix(".binary"))
    return path


def build_binary(arpa: Path, out: Path) -> Path:
    """Convert an ARPA file to KenLM's probing binary with ``build_binary`` (found beside ``lmplz``)."""
    tool, tmp = _find_tool("build_binary"), temp_path(Path(out))
    try:
        done = subprocess.run([str(tool), "probing", str(arpa), str(tmp)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ModelError(f"{arpa}: build_binary failed (exit {done.returncode}):\n{_tail(done.stderr + done.stdout)}")
        commit_file(tmp, Path(out))
    finally:
        tmp.unlink(missing_ok=True)
    return Path(out)


def _corpus_chunks(texts: Texts, rows_per_chunk: int = 65_536) -> Iterator[bytes]:
    """``texts`` as newline-terminated UTF-8 lines, a batch of rows at a time, nulls skipped."""
    if isinstance(texts, (pa.Array, pa.ChunkedArray)):
        batches = (texts.slice(i, rows_per_chunk) for i in range(0, len(texts), rows_per_chunk))
    else:
        batches = (pa.array(b, pa.large_string()) for b in _batched(texts, rows_per_chunk))
    for batch in batches:
        lines = pc.replace_substring_regex(pc.drop_null(batch.cast(pa.large_string())), _NOT_QUERY_SPACE, " ")
        if len(lines):
            yield ("\n".join(lines.to_pylist()) + "\n").encode()


def _batched(items: Iterable[str], n: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass(frozen=True, eq=False)
class NgramLM:
    """A KenLM model (ARPA or binary) and the one verb ``score``."""

    path: Path
    model: kenlm.Model

    @classmethod
    def load(cls, path: Path) -> NgramLM:
        path = Path(path)
        if not path.is_file():
            raise ModelError(f"{path}: no such LM file. Hint: train one with models.lm.train_arpa")
        try:
            config = kenlm.Config()
            config.show_progress, config.arpa_complain = False, 2  # quiet: no progress bar, no "build a binary"
            return cls(path, kenlm.Model(str(path), config))
        except (OSError, RuntimeError) as e:
            raise ModelError(f"{path}: cannot load as a KenLM model (ARPA or binary): {e}") from None

    @property
    def order(self) -> int:
        return self.model.order

    def fingerprint(self) -> str:
        """sha256 of the model file (ARPA and binary of one model differ; each is its own model)."""
        return hash_file(self.path)

    def score(self, texts: Texts) -> pa.Table:
        """Score each sentence with <s> and </s>: ``log10_prob``, ``tokens`` = words + 1 (for </s>),
        ``cross_entropy`` = −log10_prob·ln 10 / tokens (nats), ``perplexity`` = 10^(−log10_prob / tokens).

        One ``kenlm.Model.score`` call per row (kenlm has no batch call); everything else is Arrow
        compute. A null row gets nulls. Row order is kept; the result has schema ``SCORES``.
        """
        arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.string())
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pc.any(pc.match_substring(arr, "\0")).as_py():
            arr = pc.replace_substring(arr, "\0", " ")  # kenlm reads a C string: it would stop at a NUL
        utf8 = pc.fill_null(arr, "").cast(pa.large_binary()).to_pylist()  # bytes: kenlm skips an encode
        log10_prob = np.fromiter(map(self.model.score, utf8), np.float64, count=len(utf8))  # bos, eos
        trimmed = pc.ascii_trim_whitespace(arr)  # kenlm splits on ASCII whitespace, as these do
        words = pc.if_else(pc.equal(pc.binary_length(trimmed), 0), 0, pc.list_value_length(pc.ascii_split_whitespace(trimmed)))
        tokens = pc.fill_null(words, 0).to_numpy().astype(np.int64) + 1
        per_token = -log10_prob / tokens
        mask = pc.is_null(arr).to_numpy(zero_copy_only=False) if arr.null_count else None
        return pa.table(
            [
                pa.array(log10_prob, mask=mask),
                pa.array(tokens, mask=mask),
                pa.array(per_token * _LN10, mask=mask),
                pa.array(10.0**per_token, mask=mask),
            ],
            schema=SCORES,
        )
