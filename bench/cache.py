"""A fully cached ingest re-run against the cold run that filled the cache (goal: <= 5 % of its time).

Baseline: the cold ``ingest_flow`` run (read -> duplicates -> clean) over N seeded demo pairs into an
empty cache. Measured: the same flow with the same profile again, every stage cached (still hashing
the input files, checking manifests and registering the run in the catalog). Both are timed around
the flow call, in one process under one temporary Prefect server whose start-up is outside both; a
1,000-pair warm-up run in another cache goes first, so neither timed run pays Prefect's first-call
costs. The cached time is the median of ``--repeat`` re-runs. Exits 1 when the goal is missed.

    .venv/bin/python bench/cache.py --rows 1000000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import bench_conf, demo_pairs, median, prefect_server, run_ingest, stage_rows, workdir
from storage.catalog import Catalog

GOAL = 0.05


def artifact_count(cache: Path) -> int:
    return Catalog(cache).query("SELECT count(*) AS n FROM artifacts")["n"][0].as_py()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="cached re-runs; their median is reported")
    a = ap.parse_args(argv)

    with workdir("cache") as root:
        ds = demo_pairs(root / "data", a.rows, seed=a.seed)
        warm_ds = demo_pairs(root / "warm-data", 1000, seed=a.seed)
        conf = bench_conf(root / "cache", ds, shard_size=a.shard_size)
        with prefect_server(root):
            run_ingest(bench_conf(root / "warm-cache", warm_ds, shard_size=a.shard_size))
            cold, cold_s = run_ingest(conf)
            assert all(s["status"] == "computed" for s in cold["stages"]), cold["stages"]
            rows = stage_rows(cold)
            assert rows["read"]["part"] + rows["read"].get("rejects", 0) == a.rows, rows  # every input row read
            n_artifacts = artifact_count(conf.cache)
            cached_s = []
            for _ in range(a.repeat):
                again, seconds = run_ingest(conf)
                assert [s["status"] for s in again["stages"]] == ["cached"] * len(cold["stages"]), again["stages"]
                assert stage_rows(again) == rows, (stage_rows(again), rows)
                assert artifact_count(conf.cache) == n_artifacts
                cached_s.append(seconds)
    ratio = median(cached_s) / cold_s
    print(
        f"cache n={a.rows:,}: cold {cold_s:.1f} s, cached {median(cached_s):.2f} s "
        f"(runs {', '.join(f'{s:.2f}' for s in cached_s)}) = {100 * ratio:.1f} % of cold (goal <= {100 * GOAL:.0f} %)"
    )
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
