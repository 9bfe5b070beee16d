"""Word alignment of the bitext as rounds of stages: fast_align's EM over the bitext's parts (thesis ch. 6, step 1;
issue 51). No task holds the corpus: each holds a part and the lexical table (models/aligner/sharded.py).

    align_words  (mapped)  each part's words in order of first appearance, its pairs' token counts
    align_vocab  (reduce)  the bitext's vocabularies (the ids the one-process encoder gives), their sizes, the (m, n)
                           counts, the length multipliers (Σ m/n in line order)
    align_ids    (mapped)  each part's pairs as those word ids, encoded once for every round after (``IDS``)
    align_estep  (mapped)  per EM iteration but the last: the part's expected counts, both directions (e, f, count)
    align_mstep  (reduce)  per EM iteration but the last: the counts summed in part order, λ optimised, θ normalised
    align        (mapped)  the last iteration: Viterbi links both ways, grow-diag-final-and (the `alignments` view);
                           part i = bitext part i's pairs in order; shard 0 also keeps the final models (fwd_table,
                           rev_table: e, f, log_prob; aligner: tensions, length multipliers, p0), as the one-process
                           stage did

Every round is an artifact, so a killed alignment resumes from its last finished round and recomputes only the
parts missing. Its links and tables are the one-process aligner's with one chunk per part (bit for bit); against
its default of 8 chunks θ differs by a relative 2.1e-11 at most on Multi30k (tests/models/test_aligner_sharded.py: 1e-9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError, ModelError
from models.aligner import FastAlign
from models.aligner.encoding import Side, encode
from models.aligner.sharded import (
    Accumulator,
    PartCounts,
    Theta,
    direction_lengths,
    expected_counts,
    length_histogram,
    maximise,
    merge_vocab,
    srclen_fold,
    viterbi,
)
from storage.artifacts import ArtifactRef
from storage.parts import Parts
from tasks.runtime.stage import Stage
from tasks.self_training.alignment import alignment_rows

DIRECTIONS = (("forward", "fwd", False), ("reverse", "rev", True))  # (name in `aligner`, role prefix, e is the target)
COUNTS = pa.schema([("e", pa.int32()), ("f", pa.int32()), ("count", pa.float64())])  # e = 0: NULL, else word id + 1
THETA = pa.schema([("e", pa.int32()), ("f", pa.int32()), ("theta", pa.float64())])
IDS = pa.schema([("src", pa.large_list(pa.int32())), ("tgt", pa.large_list(pa.int32()))])  # a pair's word ids
STATS = pa.schema(
    [
        ("direction", pa.string()),
        ("log_likelihood", pa.float64()),
        ("diagonal_feature", pa.float64()),
        ("null_posterior", pa.float64()),
    ]
)


def _sides(bitext: pa.Table, lowercase: bool, vocab: Parts | None = None) -> tuple[Side, Side]:
    def side(column: str) -> Side:  # the aligner splits on whitespace as models.lexicon.tokenize does
        texts = pc.utf8_lower(bitext[column]) if lowercase else bitext[column]
        return encode(texts, None if vocab is None else vocab.side(f"{column}_vocab")["word"].combine_chunks())

    return side("src"), side("tgt")


def _ids_column(side: Side) -> pa.LargeListArray:
    return pa.LargeListArray.from_arrays(pa.array(side.offsets, pa.int64()), pa.array(side.ids, pa.int32()))


def _id_sides(ids: pa.Table) -> tuple[Side, Side]:
    """A part's sides from its ``IDS`` rows (ids only: the vocabularies' sizes are in align_vocab's part table)."""

    def side(column: str) -> Side:
        lists = ids[column].combine_chunks()
        offsets = lists.offsets.to_numpy()
        return Side(pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int32), offsets - offsets[0], None)

    return side("src"), side("tgt")


def part_ids(bitext: pa.Table, *, vocab: Parts, lowercase: bool = False) -> dict[str, pa.Table]:
    """One part's pairs as the bitext's word ids (``IDS``), so that no later round reads and encodes the text again."""
    src, tgt = _sides(bitext, lowercase, vocab)
    return {"part": pa.table([_ids_column(src), _ids_column(tgt)], schema=IDS)}


def part_words(bitext: pa.Table, *, lowercase: bool = False) -> dict[str, pa.Table]:
    """One part's words in order of first appearance (roles src_words, tgt_words) and its pairs' token counts."""
    src, tgt = _sides(bitext, lowercase)
    return {
        "src_words": pa.table({"word": src.vocab}),
        "tgt_words": pa.table({"word": tgt.vocab}),
        "part": pa.table({"src_tokens": src.lengths.astype(np.int32), "tgt_tokens": tgt.lengths.astype(np.int32)}),
    }


def vocabulary(words: Parts) -> dict[str, pa.Table]:
    """The bitext's vocabularies (roles src_vocab, tgt_vocab: word id = row), the (src_len, tgt_len) counts of the
    pairs with both sides (role lengths) and per direction the length multiplier mean m/n, summed in line order."""
    n = len(words.paths)
    vocabs = {c: merge_vocab(words.side(f"{c}_words", i)["word"].combine_chunks() for i in range(n)) for c in ("src", "tgt")}
    histograms, fwd, rev = [], 0.0, 0.0
    for t in words.tables(["src_tokens", "tgt_tokens"]):
        s, g = (t[c].to_numpy().astype(np.int64) for c in ("src_tokens", "tgt_tokens"))
        fwd, rev = srclen_fold(fwd, g, s), srclen_fold(rev, s, g)  # forward: m = target length, n = source length
        histograms.append(length_histogram(s, g))
    lengths = (
        pa.concat_tables(histograms)
        .group_by(["src_len", "tgt_len"], use_threads=False)
        .aggregate([("count", "sum")])
        .rename_columns(["src_len", "tgt_len", "count"])
        .sort_by([("src_len", "ascending"), ("tgt_len", "ascending")])
    )
    valid = int(pc.sum(lengths["count"]).as_py() or 0)
    multiplier = [total / valid if valid else 1.0 for total in (fwd, rev)]
    n_src, n_tgt = len(vocabs["src"]), len(vocabs["tgt"])
    return {
        "src_vocab": pa.table({"word": vocabs["src"]}),
        "tgt_vocab": pa.table({"word": vocabs["tgt"]}),
        "lengths": lengths,
        "part": pa.table(
            {
                "direction": ["forward", "reverse"],
                "mean_srclen_multiplier": multiplier,
                "valid_pairs": [valid] * 2,
                "e_words": [n_src, n_tgt],  # forward: e is the source, f the target
                "f_words": [n_tgt, n_src],
            }
        ),
    }


def _words(vocab: Parts, reverse: bool) -> tuple[int, int]:
    """(e words, f words) of one direction, from align_vocab's part table (the vocabularies themselves not read)."""
    row = _params(vocab)["reverse" if reverse else "forward"]
    return row["e_words"], row["f_words"]


def _sizes(vocab: Parts, reverse: bool) -> tuple[int, int]:
    """(rows of θ: e words + NULL, f words) of one direction."""
    e, f = _words(vocab, reverse)
    return e + 1, f


def _model(previous: Parts, vocab: Parts, role: str, reverse: bool) -> tuple[Theta, float]:
    """θ and λ of one direction from an M-step's artifact."""
    rows = previous.side(role)
    theta = Theta.of_rows(*(rows[c].to_numpy() for c in ("e", "f", "theta")), _sizes(vocab, reverse)[0])
    return theta, _params(previous)["reverse" if reverse else "forward"]["tension"]


def _params(artifact: Parts) -> dict[str, dict[str, Any]]:
    return {r["direction"]: r for r in artifact.table().to_pylist()}


def part_counts(
    ids: pa.Table, *, vocab: Parts, previous: Parts | None = None, tension: float = 4.0, p0: float = 0.08
) -> dict[str, pa.Table]:
    """The E-step over one part (its ``IDS`` rows), both directions: roles fwd_counts, rev_counts (``COUNTS``), the
    part's statistics (``STATS``). ``previous``: the last M-step's artifact (θ, λ); none before the first (θ = 1e-9,
    λ = ``tension``)."""
    src, tgt = _id_sides(ids)
    out, stats = {}, []
    for name, role, reverse in DIRECTIONS:
        theta, lam = _model(previous, vocab, role, reverse) if previous is not None else (None, tension)
        sizes = _words(vocab, reverse)
        c = expected_counts(*((tgt, src) if reverse else (src, tgt)), theta, tension=lam, p0=p0, sizes=sizes)
        out[f"{role}_counts"] = pa.table([c.e, c.f, c.count], schema=COUNTS)
        stats.append([name, *c.stats.tolist()])
    out["part"] = pa.table(list(map(list, zip(*stats, strict=True))), schema=STATS)
    return out


def _counts_of(estep: Parts, role: str, name: str) -> Iterator[PartCounts]:
    for i in range(len(estep.paths)):
        c, s = estep.side(f"{role}_counts", i), estep.side("part", i).to_pylist()
        stats = next(r for r in s if r["direction"] == name)
        yield PartCounts(
            c["e"].to_numpy(),
            c["f"].to_numpy(),
            c["count"].to_numpy(),
            np.array([stats["log_likelihood"], stats["diagonal_feature"], stats["null_posterior"]]),
        )


def maximisation(
    estep: Parts,
    vocab: Parts,
    previous: Parts | None = None,
    *,
    iteration: int,
    tension: float = 4.0,
    alpha: float = 0.01,
    optimize_tension: bool = True,
) -> dict[str, pa.Table]:
    """The M-step after E-step ``iteration``, both directions: the parts' counts summed in part order (a part at a
    time into the table), λ optimised (after every iteration but the first), θ normalised (VB, ``alpha``): roles
    fwd, rev (``THETA``) and per direction λ and ln likelihood. ``previous``: the M-step before (its pairs, its λ)."""
    lengths, params = vocab.side("lengths"), _params(vocab)
    out, rows = {}, []
    for name, role, reverse in DIRECTIONS:
        before, lam = _model(previous, vocab, role, reverse) if previous is not None else (None, tension)
        acc = Accumulator(*_sizes(vocab, reverse), before)
        if before is None:
            acc.union(_counts_of(estep, role, name))
        for part in _counts_of(estep, role, name):
            acc.add(part)
        theta, lam = maximise(
            acc,
            iteration=iteration,
            tension=lam,
            lengths=direction_lengths(lengths, reverse=reverse),
            alpha=alpha,
            optimize_tension=optimize_tension,
        )
        out[role] = pa.table([theta.rows(), theta.cols, theta.theta], schema=THETA)
        rows.append(
            {
                "direction": name,
                "iteration": iteration,
                "tension": lam,
                "log_likelihood": float(acc.stats[0]),
                **_multiplier(params[name]),
            }
        )
    out["part"] = pa.Table.from_pylist(rows)
    return out


def _multiplier(vocab_row: dict[str, Any]) -> dict[str, float]:
    return {"mean_srclen_multiplier": vocab_row["mean_srclen_multiplier"]}


def align_part(
    bitext: pa.Table, ids: pa.Table, *, vocab: Parts, previous: Parts, shard: int, p0: float = 0.08
) -> dict[str, pa.Table]:
    """The last iteration over one part (its rows and their ``IDS``): Viterbi links both ways with the last M-step's
    θ and λ, grow-diag-final-and, the `alignments` rows (``ALIGNMENT``) of the part's pairs in order. Shard 0 also
    writes the final models."""
    if ids.num_rows != bitext.num_rows:
        raise ModelError(f"fast_align: part {shard} has {bitext.num_rows} pairs but {ids.num_rows} encoded (a stale align_ids?)")
    src, tgt = _id_sides(ids)
    params = _params(previous)
    models, links = {role: _model(previous, vocab, role, reverse) for _, role, reverse in DIRECTIONS}, {}
    for _, role, reverse in DIRECTIONS:
        theta, lam = models[role]
        sizes = _words(vocab, reverse)
        links[role] = viterbi(*((tgt, src) if reverse else (src, tgt)), theta, reverse=reverse, tension=lam, p0=p0, sizes=sizes)
    out = {"part": alignment_rows(bitext["uid"], bitext, src.lengths, tgt.lengths, links["fwd"], links["rev"])}
    if shard == 0:
        words = {c: vocab.side(f"{c}_vocab")["word"].combine_chunks() for c in ("src", "tgt")}
        for name, role, reverse in DIRECTIONS:
            theta, lam = models[role]
            e_words, f_words = (words["tgt"], words["src"]) if reverse else (words["src"], words["tgt"])
            model = FastAlign(
                reverse=reverse,
                tension=lam,
                mean_srclen_multiplier=params[name]["mean_srclen_multiplier"],
                p0=p0,
                log_likelihood=(),
                favor_diagonal=True,
                e_vocab=e_words,
                f_vocab=f_words,
                row_ptr=theta.row_ptr,
                cols=theta.cols,
                theta=theta.theta,
            )
            out[f"{role}_table"] = model.table()
        out["aligner"] = pa.table(
            {
                "direction": [d for d, _, _ in DIRECTIONS],
                "tension": [params[d]["tension"] for d, _, _ in DIRECTIONS],
                "mean_srclen_multiplier": [params[d]["mean_srclen_multiplier"] for d, _, _ in DIRECTIONS],
                "p0": [p0, p0],
            }
        )
    return out


ALIGN_WORDS = Stage("align_words", "1", part_words)
ALIGN_VOCAB = Stage("align_vocab", "2", vocabulary, reduce=True)
ALIGN_IDS = Stage("align_ids", "1", part_ids, lazy_side=("vocab",))
ALIGN_ESTEP = Stage("align_estep", "2", part_counts, lazy_side=("vocab", "previous"))
ALIGN_MSTEP = Stage("align_mstep", "1", maximisation, reduce=True)
ALIGN = Stage("align", "2", align_part, view="alignments", lazy_side=("vocab", "previous"), shard_arg=True)

StageRunner = Callable[..., ArtifactRef]  # flows.engine.driver.run_stage with its run bound


def align_rounds(
    run_stage: StageRunner,
    bitext: ArtifactRef,
    *,
    lowercase: bool = False,
    iterations: int = 5,
    p0: float = 0.08,
    alpha: float = 0.01,
    tension: float = 4.0,
    optimize_tension: bool = True,
) -> ArtifactRef:
    """The rounds above, in order, on the flow's ``run_stage``: fast_align both ways over ``bitext`` (``iterations``
    EM iterations, the last one only decoding, as the tool's ``-d -o -v -I``); returns the `align` artifact."""
    if iterations < 2:
        raise ConfError(f"aligner.iterations = {iterations}, must be >= 2 (the last iteration only decodes)")
    words = run_stage(ALIGN_WORDS, inputs=[bitext], params={"lowercase": lowercase})
    vocab = run_stage(ALIGN_VOCAB, inputs=[words], n_shards=1, params={})
    ids = run_stage(ALIGN_IDS, inputs=[bitext], side={"vocab": vocab}, params={"lowercase": lowercase})
    previous = None
    for iteration in range(iterations - 1):
        first = {"tension": tension} if previous is None else {}  # later rounds take λ from the M-step before
        side = {"vocab": vocab, **({"previous": previous} if previous is not None else {})}
        counts = run_stage(ALIGN_ESTEP, inputs=[ids], side=side, params={"p0": p0, **first})
        previous = run_stage(
            ALIGN_MSTEP,
            inputs=[counts, vocab, *([previous] if previous is not None else [])],
            n_shards=1,
            params={"iteration": iteration, "alpha": alpha, "optimize_tension": optimize_tension, **first},
        )
    return run_stage(ALIGN, inputs=[bitext, ids], side={"vocab": vocab, "previous": previous}, params={"p0": p0})
