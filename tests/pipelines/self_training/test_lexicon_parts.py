"""The lexicon and force alignment as map + reduce (issue 51): counts per part, summed, equal the one-process tables."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tasks.self_training.lexicon as lex
from conf.errors import InputError
from demo import iter_bitext
from models.lexicon import build_lexicon, linked_words, tokenize
from storage.parts import Parts
from tests.conftest import bitext

PAIRS = 350


@pytest.fixture(scope="module")
def demo_pairs() -> tuple[pa.Table, pa.Table]:
    """The demo grammar's pairs and their gold links, as a bitext and the `align` artifact's columns."""
    triples = list(iter_bitext(PAIRS, seed=11))
    rows = bitext([(s, t) for s, t, _ in triples])
    links = [[tuple(map(int, link.split("-"))) for link in a.split()] for _, _, a in triples]
    alignment = pa.table(
        {
            "uid": rows["uid"],
            "src_pos": pa.array([[i for i, _ in ls] for ls in links], pa.list_(pa.int32())),
            "tgt_pos": pa.array([[j for _, j in ls] for ls in links], pa.list_(pa.int32())),
        }
    )
    return rows, alignment


def _one_process(rows: pa.Table, alignment: pa.Table) -> pa.Table:
    """The lexicon counted over every link at once (no parts, no sums)."""
    offsets = np.asarray(alignment["src_pos"].combine_chunks().offsets, np.int64)
    i = alignment["src_pos"].combine_chunks().flatten().to_numpy()
    j = alignment["tgt_pos"].combine_chunks().flatten().to_numpy()
    return build_lexicon(linked_words(tokenize(rows["src"]), tokenize(rows["tgt"]), offsets, i, j))


def _cuts(n: int, k: int) -> list[tuple[int, int]]:
    bounds = [n * s // k for s in range(k + 1)]
    return [(a, b - a) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("k", [1, 2, 7])
def test_link_counts_per_part_summed_equal_the_one_process_lexicon_issue_51(demo_pairs, tmp_path, monkeypatch, k):
    rows, alignment = demo_pairs
    monkeypatch.setattr(lex, "FOLD_ROWS", 50)  # the running total is added into several times
    counts = [lex.link_counts_of(rows.slice(a, n), alignment.slice(a, n)) for a, n in _cuts(PAIRS, k)]
    assert [c.schema for c in counts] == [lex.COUNTS] * k
    got = lex.lexicon(Parts.of_tables(counts, tmp_path / "counts"))
    want = _one_process(rows, alignment)
    assert got.equals(want)  # the same rows, order, counts and p, to the last bit
    assert sum(got["count"].to_pylist()) == sum(len(x) for x in alignment["src_pos"].to_pylist())  # every link once
    assert got.num_rows == want.num_rows and got.num_rows > 100


def test_link_counts_refuses_an_alignment_of_other_pairs_issue_51(demo_pairs):
    rows, alignment = demo_pairs
    swapped = pa.concat_tables([alignment.slice(1, 1), alignment.slice(0, 1), alignment.slice(2, 8)])
    with pytest.raises(InputError) as e:
        lex.link_counts_of(rows.slice(0, 10), swapped)
    uid = rows["uid"][0].as_py()
    assert str(e.value) == (
        f"link_counts: the alignment's rows are not the bitext's rows, in order (row 0 (0-based) of the part: uid {uid} "
        f"in the bitext, {alignment['uid'][1].as_py()} aligned). Hint: a stale `align` artifact? "
        "`augdag retry RUN --from align` computes it again and what follows"
    )
    with pytest.raises(InputError, match=r"^link_counts: the alignment's rows are not the bitext's rows, in order \(10 bitext"):
        lex.link_counts_of(rows.slice(0, 10), alignment.slice(0, 9))


def test_word_uncertainty_frequencies_added_part_by_part_equal_one_count_issue_51(demo_pairs, tmp_path, monkeypatch):
    from models.lexicon import word_uncertainty

    rows, alignment = demo_pairs
    monkeypatch.setattr(lex, "FOLD_ROWS", 10)
    lexicon = _one_process(rows, alignment)
    lexicon_parts = Parts.of_tables([lexicon], tmp_path / "lexicon")
    got = lex.source_word_uncertainty(
        lexicon_parts, Parts.of_tables([rows.slice(a, n) for a, n in _cuts(PAIRS, 7)], tmp_path / "bitext")
    )
    assert got.equals(word_uncertainty(lexicon, tokenize(rows["src"])))
    assert sum(got["freq"].to_pylist()) == sum(len(s.split()) for s in rows["src"].to_pylist())


@pytest.fixture(scope="module")
def aligned_demo(tmp_path_factory) -> tuple[pa.Table, dict[str, pa.Table], Parts]:
    """300 demo pairs aligned by `align` (one part), its roles written as the artifact writes them."""
    from tasks.self_training.alignment import align_bitext

    root = tmp_path_factory.mktemp("align")
    rows = bitext([(s, t) for s, t, _ in iter_bitext(300, seed=12)])
    out = align_bitext(Parts.of_tables([rows], root / "bitext"))
    for role, table in out.items():
        pq.write_table(table, root / f"{role}-00000.parquet")
    return rows, out, Parts((root / "part-00000.parquet",))


@pytest.mark.parametrize("k", [1, 2, 7])
def test_force_align_per_part_equals_the_whole_pairs_at_once_issue_51(aligned_demo, k):
    """Part i of `force_align` is the pairs' part i aligned, in order: the parts together are the rows of the pairs
    aligned at once, and the training pairs get back `align`'s own links (its last iteration decodes only)."""
    rows, out, alignment = aligned_demo
    pairs = rows.append_column("parent_uid", rows["uid"])
    whole = lex.force_align(pairs, alignment=alignment, key="parent_uid")
    parts = [lex.force_align(pairs.slice(a, n), alignment=alignment, key="parent_uid") for a, n in _cuts(300, k)]
    assert [p.num_rows for p in parts] == [n for _, n in _cuts(300, k)]
    assert pa.concat_tables(parts).equals(whole)
    assert whole.equals(out["part"])  # uid (from parent_uid), source, line, links, positions, lengths, coverage


def test_bins_join_the_coverage_of_several_force_aligned_artifacts_issue_51(tmp_path):
    """`force_align` runs once per synthetic dataset now: BINS takes their artifacts as its last ``alignments``
    inputs, and bins exactly as over one artifact of all their rows (what the reduce wrote before)."""
    from tasks.self_training.uncertainty import uncertainty_bins

    rows = bitext([(f"sentence {i}", f"satz {i}") for i in range(103)])
    u = np.random.default_rng(0).uniform(0, 4, 103)
    scored = rows.select(["uid", "source", "line"]).append_column("tokens", pa.array([2] * 103, pa.int32()))
    scored = scored.append_column("uncertainty", pa.array(u)).append_column("word_rarity", pa.array(u[::-1].copy()))
    coverage = pa.table({"uid": scored["uid"], "coverage": [i / 103 for i in range(103)]})
    scored_parts = Parts.of_tables([scored.slice(0, 60), scored.slice(60)], tmp_path / "scored")
    one = uncertainty_bins(scored_parts, Parts.of_tables([coverage], tmp_path / "one"), bins=5, aligned=True)
    two = uncertainty_bins(
        scored_parts,
        Parts.of_tables([coverage.slice(0, 40)], tmp_path / "a"),
        Parts.of_tables([coverage.slice(40)], tmp_path / "b"),
        bins=5,
        aligned=True,
        alignments=2,
    )
    assert two.equals(one) and two["rows"].to_pylist() == [21, 21, 21, 20, 20]
    covered = sum(r * c for r, c in zip(two["rows"].to_pylist(), two["coverage"].to_pylist()))
    assert covered == pytest.approx(sum(range(103)) / 103, rel=1e-12)  # every row's coverage, each once
