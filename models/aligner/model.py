"""The `FastAlign` model API: training (the tool's `-d -o -v [-r]`), force alignment (`-f`), the `-p` table.

Training follows fast_align.cc: every pair before the first normalisation has θ = 1e-9, so iteration 0 is the
prior alone; λ is optimised after each iteration but the first and last (`-o`); the last iteration only
decodes (Viterbi per target word, NULL wins ties, then the leftmost source word). `mean_srclen_multiplier` =
mean |f|/|e| over the pairs with both sides, from the first pass, summed in line order. `reverse` conditions
on the target (the tool's `-r`); links are always (src, tgt). A pair with an empty side is skipped by training
(the tool counts it in the corpus statistics and divides by zero) and gets no links and a NaN score.

Counts are summed per contiguous sentence chunk and the chunks reduced in order, so a run is bit-for-bit
repeatable for a given chunk count (the tool's OpenMP updates race): `threads` changes no bit while `chunks`
(default max(8, threads)) may change the last ones; `chunk_rows` makes the chunks given sentence counts (the parts
of the sharded EM, models/aligner/sharded.py, whose bits it then gives). Each cell's table index is written once (4 bytes a cell)
for the first sentences whose cells fit in `CELL_INDEX_BUDGET` (256 MiB: 64M cells, a 100k-pair corpus of
~25-token sentences); the other sentences find theirs once per pass by a forward walk along each source word's
table row (`table.sentence_index`): the same indexes, the same bits. The index pays on short sentences
(`align_both` of 100k demo pairs of ~7 tokens: 0.37 s with it, 0.94 s without); on ~25-token ones the walk is
as fast (150k pairs: 8.7 s either way), so a larger budget would only cost memory (12 GB for 4.5M such pairs).
`export_table` writes shortest round-trip floats (the tool: 6 significant digits) and rows sorted by ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from conf.errors import InputError, ModelError
from models.aligner import kernels
from models.aligner.alignment import Alignment, links_from_best
from models.aligner.direction import Direction, chunk_bounds
from models.aligner.encoding import Side, Texts, encode, paired
from models.aligner.pool import n_threads
from models.aligner.symmetrise import grow_diag_final_and
from models.aligner.table import UNSEEN, build_table

NULL = "<eps>"  # the NULL source word in exported tables (source id 0)
TABLE_SCHEMA = pa.schema([("e", pa.string()), ("f", pa.string()), ("log_prob", pa.float64())])
CHUNKS = 8  # default sentence chunks (counts are reduced in chunk order: results depend on this, not on threads)
CELL_INDEX_BUDGET = 1 << 28  # bytes for the table index of the first sentences' (j, i) cells; the rest walk the rows
COUNT_BUDGET = 1 << 30  # bytes for the per-chunk count arrays; fewer chunks beyond it


@dataclass(frozen=True, eq=False)
class FastAlign:
    """One direction's trained fast_align model: θ(f | e) over the co-occurring pairs (CSR by e, e = 0 NULL)."""

    reverse: bool  # True: p(src | tgt), the tool's -r
    tension: float  # λ after optimisation (the one the last iteration decoded with)
    mean_srclen_multiplier: float
    p0: float
    log_likelihood: tuple[float, ...]  # ln likelihood per iteration, as the tool prints
    favor_diagonal: bool
    e_vocab: pa.Array = field(repr=False)  # conditioning-side words; e id = index + 1 (0 is NULL)
    f_vocab: pa.Array = field(repr=False)  # generated-side words
    row_ptr: np.ndarray = field(repr=False)  # int64, len(e_vocab) + 2
    cols: np.ndarray = field(repr=False)  # int32 f ids, sorted within a row
    theta: np.ndarray = field(repr=False)  # float64 θ(f | e)

    @classmethod
    def train(
        cls,
        src: Texts,
        tgt: Texts,
        *,
        reverse: bool = False,
        iterations: int = 5,
        p0: float = 0.08,
        alpha: float = 0.01,
        tension: float = 4.0,
        optimize_tension: bool = True,
        favor_diagonal: bool = True,
        variational_bayes: bool = True,
        threads: int | None = None,
        chunks: int | None = None,
    ) -> tuple[FastAlign, Alignment]:
        """Train on the bitext (the tool's `-d -o -v` with the defaults) and return the last iteration's links.

        `chunks` (default max(8, threads)) fixes the summation order: equal chunks, equal bits, any `threads`.
        """
        s, t = paired(src, tgt)
        ss, ts = encode(s), encode(t)
        return _train(
            ss,
            ts,
            reverse=reverse,
            iterations=iterations,
            p0=p0,
            alpha=alpha,
            tension=tension,
            optimize_tension=optimize_tension,
            favor_diagonal=favor_diagonal,
            variational_bayes=variational_bayes,
            threads=threads,
            chunks=chunks,
        )

    def align(self, src: Texts, tgt: Texts, *, threads: int | None = None) -> tuple[Alignment, np.ndarray]:
        """Force alignment (the tool's `-f`): Viterbi links and ln p(f, a | e) per pair (NaN for an empty side).

        ln p = ln Poisson(m; 0.05 + n·mean_srclen_multiplier) + Σ_j ln Σ_i p(a_j = i)·θ(f_j | e_i), unknown
        pairs at θ = 1e-9."""
        s, t = paired(src, tgt)
        e_txt, f_txt = (t, s) if self.reverse else (s, t)
        e, f = encode(e_txt, self.e_vocab), encode(f_txt, self.f_vocab)
        d = Direction.of(e, f)
        best = np.full(len(f.ids), -1, np.int32)
        sent_ll = np.zeros(len(d.valid))
        nt = n_threads(threads)
        bounds = chunk_bounds(d.cell_off, max(CHUNKS, nt))
        d.em_pass(
            self.row_ptr,
            self.cols,
            self.theta,
            np.zeros(0, np.int32),
            bounds,
            True,
            self.tension,
            self.p0,
            self.favor_diagonal,
            np.zeros((len(bounds) - 1, 0)),
            np.zeros((len(bounds) - 1, 3)),
            sent_ll,
            best,
            nt,
        )
        lp = kernels.log_scores(f.lengths, 0.05 + e.lengths * self.mean_srclen_multiplier, sent_ll, d.valid)
        return Alignment(*links_from_best(best, f.offsets, self.reverse)), lp

    def table(self) -> pa.Table:
        """The translation table: e, f (strings, NULL as "<eps>"), log_prob = ln θ(f | e); rows by e id, f id."""
        e_names = pa.concat_arrays([pa.array([NULL], pa.string()), self.e_vocab.cast(pa.string())])
        e_of = np.repeat(np.arange(len(self.row_ptr) - 1), np.diff(self.row_ptr))
        with np.errstate(divide="ignore"):
            lp = np.log(self.theta)
        return pa.table(
            [e_names.take(pa.array(e_of)), self.f_vocab.cast(pa.string()).take(pa.array(self.cols)), pa.array(lp)],
            schema=TABLE_SCHEMA,
        )

    def export_table(self, path: str | Path, *, beam_threshold: float = -4.0) -> int:
        """Write the tool's `-p` file (e<TAB>f<TAB>ln θ, NULL as "<eps>"): the rows it keeps, ln θ >=
        −ln(max_f θ(f|e))·beam_threshold per e (−inf keeps all). Returns the row count."""
        table = self.table()
        lp = table["log_prob"].to_numpy()
        if np.isfinite(beam_threshold) and len(lp):
            nonempty = np.diff(self.row_ptr) > 0
            row_max = np.full(len(self.row_ptr) - 1, -np.inf)
            row_max[nonempty] = np.maximum.reduceat(lp, self.row_ptr[:-1][nonempty])
            e_of = np.repeat(np.arange(len(self.row_ptr) - 1), np.diff(self.row_ptr))
            table = table.filter(pa.array(lp >= (-row_max * beam_threshold)[e_of]))
        lines = pc.binary_join_element_wise(pc.cast(table["log_prob"], pa.string()), "", "\n")  # "ln θ\n"
        text = pc.binary_join_element_wise(table["e"], table["f"], lines, "\t").combine_chunks()
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as out:
            if len(text):
                off = np.frombuffer(text.buffers()[1], np.int32, len(text) + 1, text.offset * 4)
                out.write(memoryview(text.buffers()[2])[off[0] : off[-1]])
        tmp.rename(path)
        return table.num_rows

    @classmethod
    def from_table(
        cls,
        table_or_path: pa.Table | str | Path,
        *,
        tension: float,
        mean_srclen_multiplier: float,
        reverse: bool = False,
        p0: float = 0.08,
        favor_diagonal: bool = True,
    ) -> FastAlign:
        """A model for `align` from a translation table (columns e, f, log_prob), a Parquet file of one, or the
        tool's `-p` text; a repeated (e, f) keeps its last row, as the tool's reader."""
        table = table_or_path
        if not isinstance(table, pa.Table):
            path = Path(table_or_path)
            if not path.exists():
                raise InputError(f"{path}: no such translation table")
            if path.suffix == ".parquet":
                table = pq.read_table(path)
            else:
                table = pcsv.read_csv(
                    path,
                    read_options=pcsv.ReadOptions(column_names=TABLE_SCHEMA.names),
                    parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
                    convert_options=pcsv.ConvertOptions(
                        column_types=dict(zip(TABLE_SCHEMA.names, TABLE_SCHEMA.types)), null_values=[], strings_can_be_null=False
                    ),
                )
        missing = [c for c in TABLE_SCHEMA.names if c not in table.column_names]
        if missing:
            raise InputError(f"translation table: columns {missing} missing, found {table.column_names}")
        e_col = pc.cast(table["e"].combine_chunks(), pa.string())
        f_enc = pc.dictionary_encode(pc.cast(table["f"].combine_chunks(), pa.string()))
        is_null = pc.equal(e_col, NULL).to_numpy(zero_copy_only=False)
        words = e_col.filter(pa.array(~is_null))
        e_vocab = pc.unique(words)
        e_ids = np.zeros(len(e_col), np.int64)
        e_ids[~is_null] = pc.index_in(words, value_set=e_vocab).to_numpy(zero_copy_only=False) + 1
        f_ids = f_enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        n_f = max(len(f_enc.dictionary), 1)
        key = e_ids * n_f + f_ids
        order = np.argsort(key, kind="stable")
        key_sorted = key[order]
        last = np.ones(len(order), bool)
        last[:-1] = key_sorted[1:] != key_sorted[:-1]
        order = order[last]
        row_ptr = np.zeros(len(e_vocab) + 2, np.int64)
        np.cumsum(np.bincount(e_ids[order], minlength=len(e_vocab) + 1), out=row_ptr[1:])
        theta = np.exp(table["log_prob"].to_numpy()[order].astype(np.float64))
        return cls(
            reverse=reverse,
            tension=float(tension),
            mean_srclen_multiplier=float(mean_srclen_multiplier),
            p0=p0,
            log_likelihood=(),
            favor_diagonal=favor_diagonal,
            e_vocab=e_vocab,
            f_vocab=f_enc.dictionary,
            row_ptr=row_ptr,
            cols=f_ids[order].astype(np.int32),
            theta=theta,
        )

    def fingerprint(self) -> str:
        """A stable hash of the table, λ, the length multiplier and the decoding settings (artifact keys)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(
            repr(
                ("fast_align", 1, self.reverse, self.tension, self.mean_srclen_multiplier, self.p0, self.favor_diagonal)
            ).encode()
        )
        for vocab in (self.e_vocab, self.f_vocab):
            h.update("\n".join(vocab.to_pylist()).encode() + b"\0")
        for arr in (self.row_ptr.astype("<i8"), self.cols.astype("<i4"), self.theta.astype("<f8")):
            h.update(arr.tobytes())
        return h.hexdigest()


def _train(
    src: Side,
    tgt: Side,
    *,
    reverse: bool,
    iterations: int,
    p0: float,
    alpha: float,
    tension: float,
    optimize_tension: bool,
    favor_diagonal: bool,
    variational_bayes: bool,
    threads: int | None,
    chunks: int | None,
    chunk_rows: Sequence[int] | None = None,
) -> tuple[FastAlign, Alignment]:
    if iterations < 1:
        raise ModelError(f"fast_align: iterations = {iterations}, expected >= 1 (the last one only decodes)")
    if not 0 < p0 < 1 or (variational_bayes and alpha <= 0):
        raise ModelError(f"fast_align: p0 = {p0} must be in (0, 1) and alpha = {alpha} > 0")
    e, f = (tgt, src) if reverse else (src, tgt)
    d = Direction.of(e, f)
    n, m, valid = e.lengths, f.lengths, d.valid
    n_valid = int(valid.sum())
    msm = float(np.cumsum(m[valid] / n[valid])[-1] / n_valid) if n_valid else 1.0  # summed in line order
    n_target_tokens = float(m[valid].sum())
    indexed = min(int(np.searchsorted(d.cell_off, CELL_INDEX_BUDGET // 4, side="right")) - 1, len(valid))
    cell_idx = np.empty(int(d.cell_off[indexed]), np.int32)  # the cells of sentences 0 … indexed−1
    nt = n_threads(threads)
    row_ptr, cols = build_table(
        d.e_ids, d.e_off, d.f_ids, d.f_off, valid, len(e.vocab) + 1, len(f.vocab), d.cell_off, cell_idx, indexed, nt
    )
    if cols.size >= 2**31:
        raise ModelError(f"fast_align: {cols.size} translation pairs, more than an int32 index holds")
    if chunk_rows is not None:  # the sharded EM's parts (models/aligner/sharded.py): one chunk per part
        bounds = np.concatenate([[0], np.cumsum(chunk_rows)]).astype(np.int64)
        if bounds[-1] != len(valid):
            raise ModelError(f"fast_align: chunk_rows sum to {bounds[-1]} sentences, the bitext has {len(valid)}")
        k = len(bounds) - 1
    else:
        k = max(CHUNKS, nt) if chunks is None else max(1, int(chunks))
        k = max(1, min(k, COUNT_BUDGET // max(8 * cols.size, 1)))
        bounds = chunk_bounds(d.cell_off, k)
    theta = np.full(cols.size, UNSEEN)
    counts = np.zeros((k, cols.size))
    stats = np.zeros((k, 3))
    best = np.full(len(f.ids), -1, np.int32)
    sent_ll = np.zeros(len(valid))
    lls = []
    for it in range(iterations):
        final = it == iterations - 1
        d.em_pass(row_ptr, cols, theta, cell_idx, bounds, final, tension, p0, favor_diagonal, counts, stats, sent_ll, best, nt)
        ll = emp = 0.0
        for c in range(k):  # chunk order
            ll += stats[c, 0]
            emp += stats[c, 1]
        lls.append(float(ll))
        if final:
            break
        if favor_diagonal and optimize_tension and it > 0 and n_valid:
            tension = kernels.optimize_tension(
                d.lengths.pair_m, d.lengths.pair_n, d.lengths.pair_count, n_target_tokens, emp / n_target_tokens, tension
            )
        kernels.normalize(counts, row_ptr, theta, alpha, variational_bayes)
    model = FastAlign(
        reverse=reverse,
        tension=float(tension),
        mean_srclen_multiplier=msm,
        p0=p0,
        log_likelihood=tuple(lls),
        favor_diagonal=favor_diagonal,
        e_vocab=e.vocab,
        f_vocab=f.vocab,
        row_ptr=row_ptr,
        cols=cols,
        theta=theta,
    )
    return model, Alignment(*links_from_best(best, f.offsets, reverse))


def align_both(src: Texts, tgt: Texts, **train_kwargs) -> tuple[FastAlign, FastAlign, Alignment, Alignment]:
    """Forward and reverse models and their links (both as (src, tgt)); the corpus is encoded once."""
    s, t = paired(src, tgt)
    return _both(encode(s), encode(t), train_kwargs)


def align_encoded(src: Side, tgt: Side, **train_kwargs) -> tuple[FastAlign, FastAlign, Alignment, Alignment]:
    """``align_both`` of a bitext already encoded (``encoding.encode_stream``: part by part, no text kept)."""
    if len(src.lengths) != len(tgt.lengths):
        raise InputError(f"aligner: src has {len(src.lengths)} sentences, tgt has {len(tgt.lengths)}; expected the same count")
    return _both(src, tgt, train_kwargs)


def _both(ss: Side, ts: Side, train_kwargs: dict) -> tuple[FastAlign, FastAlign, Alignment, Alignment]:
    kw = {
        "iterations": 5,
        "p0": 0.08,
        "alpha": 0.01,
        "tension": 4.0,
        "optimize_tension": True,
        "favor_diagonal": True,
        "variational_bayes": True,
        "threads": None,
        "chunks": None,
        "chunk_rows": None,
        **train_kwargs,
    }
    kw.pop("reverse", None)
    fwd_model, fwd = _train(ss, ts, reverse=False, **kw)
    rev_model, rev = _train(ss, ts, reverse=True, **kw)
    return fwd_model, rev_model, fwd, rev


def symmetrize(src: Texts, tgt: Texts, **train_kwargs) -> Alignment:
    """Both directions, then grow-diag-final-and (the thesis' alignment, ch. 6)."""
    s, t = paired(src, tgt)
    ss, ts = encode(s), encode(t)
    _, _, fwd, rev = _both(ss, ts, train_kwargs)
    return grow_diag_final_and(fwd, rev, ss.lengths, ts.lengths)
