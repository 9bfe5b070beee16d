"""fast_align's EM as rounds of stages over the bitext's parts (issue 51, tasks/self_training/em.py): the same links as
the one-process aligner, one part of links per bitext part, and a killed alignment resumes from its last round."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conf.schema import AugdagConf
from storage.artifacts import ArtifactRef
from storage.parts import Parts
from tests.conftest import bitext

PAIRS = 140
ITERATIONS = 3  # E, M, E, M, then the links: every kind of round (the model tests run 5 iterations)
TOLERANCE = 1e-9  # |Δ ln θ| between the rounds and the one-process aligner (8 chunks): measured ≤ 1e-11


def toy_rows() -> pa.Table:
    from demo import iter_bitext

    return bitext([(s, t) for s, t, _ in iter_bitext(PAIRS, seed=5)])


def cuts(shards: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, PAIRS, shards + 1).astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


@functools.cache
def align_flow():
    """A flow: the toy bitext read in ``shards`` parts, then ``align_rounds`` on the real driver."""
    from prefect import flow

    from flows.engine.driver import Run, run_source_stage, run_stage
    from tasks.self_training.em import align_rounds

    @flow(name="align_rounds_test")
    def aligned(cache: str, shards: int) -> dict:
        rows = toy_rows()

        def produce():
            for i, (a, b) in enumerate(cuts(shards)):
                yield i, {"part": rows.slice(a, b - a)}

        conf = AugdagConf(cache=Path(cache))
        with Run.started(conf, pipeline="toy", profile="test", config={}) as run:
            pairs = run_source_stage(
                run, name="read", version="1", produce=produce, params={"shards": shards}, input_fingerprint="toy", dataset="toy"
            )
            align = align_rounds(functools.partial(run_stage, run), pairs, iterations=ITERATIONS)
        return {**run.finish(), "align": align}

    return aligned


def one_process(tmp_path: Path) -> dict[str, pa.Table]:
    from tasks.self_training.alignment import align_bitext

    return align_bitext(Parts.of_tables([toy_rows()], tmp_path / "one"), iterations=ITERATIONS)


def computed(summary: dict) -> list[tuple[str, str, int, int]]:
    return [(s["stage"], s["status"], s["shards_computed"], s["shards"]) for s in summary["stages"]]


@pytest.mark.parametrize("shards", [7])  # 1, 2 and 7 parts: tests/models/test_aligner_sharded.py
def test_align_rounds_give_the_one_process_links_one_part_per_bitext_part_issue_51(prefect_harness, tmp_path, shards):
    summary = align_flow()(str(tmp_path / "cache"), shards)
    align: ArtifactRef = summary["align"]
    want = one_process(tmp_path)
    parts = [align.read(i) for i in range(shards)]
    assert [p.num_rows for p in parts] == [b - a for a, b in cuts(shards)]  # part i = bitext part i's pairs
    got = pa.concat_tables(parts)
    for column in ("uid", "links", "src_pos", "tgt_pos", "aligned_src", "coverage"):
        assert got[column].equals(want["part"][column]), column
    for role in ("fwd_table", "rev_table"):
        table = align.read(0, role)
        assert table["e"].equals(want[role]["e"]) and table["f"].equals(want[role]["f"])
        diff = pc.max(pc.abs(pc.subtract(table["log_prob"], want[role]["log_prob"]))).as_py()
        assert diff <= TOLERANCE
    aligner, expected = align.read(0, "aligner").to_pylist(), want["aligner"].to_pylist()
    assert [r["direction"] for r in aligner] == ["forward", "reverse"]
    for r, e in zip(aligner, expected, strict=True):
        assert r["mean_srclen_multiplier"] == e["mean_srclen_multiplier"] and r["p0"] == e["p0"] == 0.08
        assert r["tension"] == pytest.approx(e["tension"], rel=TOLERANCE, abs=0)
    rounds = [s for s, *_ in computed(summary)]
    em = ["align_estep", "align_mstep"] * (ITERATIONS - 1)
    assert rounds == ["read", "align_words", "align_vocab", "align_ids", *em, "align"]


def test_a_killed_alignment_resumes_from_its_last_round_computing_only_what_is_missing_issue_51(prefect_harness, tmp_path):
    """Killed while the second E-step had written 2 of its 3 parts: the rerun computes the missing part, the last
    M-step and the links; every earlier round is cached, and the links' bytes are the uninterrupted run's."""
    from storage import objects

    cache = tmp_path / "cache"
    first = align_flow()(str(cache), 3)
    align: ArtifactRef = first["align"]
    before = {f: (Path(align.dir) / f).read_bytes() for f in sorted(objects.listing(align.dir, ".parquet"))}
    second = [s for s in first["stages"] if s["stage"] == "align_estep"][1]
    estep = ArtifactRef(str(cache), "align_estep", second["fingerprint"], n_shards=3)
    last_m = [s for s in first["stages"] if s["stage"] == "align_mstep"][1]
    for d in (Path(align.dir), Path(ArtifactRef(str(cache), "align_mstep", last_m["fingerprint"]).dir)):
        for f in d.iterdir():
            f.unlink()  # never written: the kill came before them
    (Path(estep.dir) / "manifest.json").unlink()
    for f in Path(estep.dir).glob("*-00001.parquet"):
        f.unlink()  # shard 1 of the second E-step was being computed
    again = align_flow()(str(cache), 3)
    assert computed(again) == [
        ("read", "cached", 0, 3),
        ("align_words", "cached", 0, 3),
        ("align_vocab", "cached", 0, 1),
        ("align_ids", "cached", 0, 3),
        ("align_estep", "cached", 0, 3),
        ("align_mstep", "cached", 0, 1),
        ("align_estep", "computed", 1, 3),
        ("align_mstep", "computed", 1, 1),
        ("align", "computed", 3, 3),
    ]
    after = {f: (Path(align.dir) / f).read_bytes() for f in sorted(objects.listing(align.dir, ".parquet"))}
    assert list(after) == [
        "aligner-00000.parquet",
        "fwd_table-00000.parquet",
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
        "rev_table-00000.parquet",
    ]
    assert after == before
