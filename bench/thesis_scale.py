"""self_training's sampling half at the thesis' size: a 4.5M-pair bitext and 10M / 40M monolingual sentences.

The data: the demo grammar's pairs and monolingual lines, k consecutive ones joined into one line, k drawn
per line (log-normal, 1..36), so lines are ~25 tokens on average with a long tail to ~250, as news
sentences are (the demo's own lines are ~7). The text is pre-tokenised (`tokenizer: whitespace`), as the
thesis' was. Written once per size under ``--data`` and reused.

Each monolingual size runs in a fresh process through the real flow (`sample_monolingual`: ingest of both,
fast_align both ways, grow-diag-final-and, lexicon, word entropy, U of the bitext and of every monolingual
shard, U_max, keys, the global draw of ``budget_ratio`` × rows without replacement, `sampled_mono`), on
threads (``--workers``), against a Prefect server in its own process (not counted). A thread samples the
flow process' RSS every 0.2 s; each stage's peak is the largest sample between its first shard's start and
its last shard's end (`stage_runs`). Goals: peak RSS <= 8 GB, the peak at the largest monolingual size no
more than 10 % above the smallest's (flat in the monolingual size), wall time <= 60 min. Exits 1 when one
is missed.

    .venv/bin/python bench/thesis_scale.py                                   # 4.5M pairs; 10M and 40M mono
    .venv/bin/python bench/thesis_scale.py --pairs 450000 --mono 1000000,4000000   # a tenth, ~10 min
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import prefect_server, workdir
from conf.schema import AugdagConf, DatasetConf, TaskRunnerConf
from demo import iter_bitext, iter_mono

RSS_GOAL, FLAT_GOAL, WALL_GOAL_S = 8e9, 1.10, 3600.0
MAX_JOIN = 36


def joins(n: int, seed: int) -> np.ndarray:
    """How many demo lines make each of ``n`` lines: mean ~3.7 (≈ 25 tokens), at most 36 (≈ 250)."""
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.lognormal(1.0, 0.8, n)), 1, MAX_JOIN).astype(int)


def write_bitext(root: Path, n: int) -> None:
    if (root / "done").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    pairs = iter_bitext(int(joins(n, 1).sum()), seed=1)
    with open(root / "train.en", "w", encoding="utf-8") as src, open(root / "train.de", "w", encoding="utf-8") as tgt:
        for k in joins(n, 1):
            chunk = [next(pairs) for _ in range(k)]
            src.write(" ".join(p[0] for p in chunk) + "\n")
            tgt.write(" ".join(p[1] for p in chunk) + "\n")
    (root / "done").touch()


def write_mono(root: Path, n: int) -> None:
    if (root / "done").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    lines = iter_mono(int(joins(n, 2).sum()), seed=2)
    with open(root / "mono.en", "w", encoding="utf-8") as out:
        for k in joins(n, 2):
            out.write(" ".join(next(lines) for _ in range(k)) + "\n")
    (root / "done").touch()


class RssSampler(threading.Thread):
    """This process' resident set every ``every`` seconds: (monotonic time, bytes)."""

    def __init__(self, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self.stop.is_set():
            with open("/proc/self/statm") as f:
                self.samples.append((time.time(), int(f.read().split()[1]) * page))
            time.sleep(self.every)


def child(args: argparse.Namespace) -> int:
    """One run of the sampling half; prints one JSON line: wall, peak, per-stage seconds and peak."""
    from prefect import flow

    from flows.engine.driver import Run
    from flows.engine.runners import run_flow
    from flows.pipelines.self_training import sample_monolingual
    from storage.catalog import Catalog

    data = Path(args.data)
    conf = AugdagConf(
        cache=Path(args.cache),
        shard_size=args.shard,
        task_runner=TaskRunnerConf(kind="threads", max_workers=args.workers),
        datasets={
            "bitext": DatasetConf(
                kind="bitext",
                format="text",
                src=data / f"bitext-{args.pairs}" / "train.en",
                tgt=data / f"bitext-{args.pairs}" / "train.de",
            ),
            "mono": DatasetConf(kind="mono", format="text", path=data / f"mono-{args.mono_rows}" / "mono.en"),
        },
        self_training={
            "bitext": "bitext",
            "mono": ["mono"],
            "tokenizer": {"kind": "whitespace"},
            "sampling": {"budget_ratio": args.budget_ratio},
        },
    )

    @flow(name="thesis_scale")
    def sampling(conf: AugdagConf) -> dict:
        with Run.started(conf, pipeline="thesis_scale", profile="bench", config=None) as run:
            sample_monolingual(run, conf)
        return run.finish()

    with prefect_server(Path(args.cache)):
        sampler = RssSampler()
        sampler.start()
        t0 = time.perf_counter()
        summary = run_flow(sampling, conf)
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
    if summary["status"] != "completed":
        print(json.dumps({"error": summary.get("error")}))
        return 1
    spans = (
        Catalog(conf.cache)
        .query(
            "SELECT stage, dataset, min(epoch(started_at)) AS t0, max(epoch(started_at) + seconds) AS t1, count(*) AS shards "
            "FROM stage_runs WHERE run_id = $run GROUP BY stage, dataset ORDER BY t0",
            {"run": summary["run_id"]},
        )
        .to_pylist()
    )
    samples = np.array(sampler.samples)
    stages = []
    for s in spans:
        inside = samples[(samples[:, 0] >= s["t0"] - 0.2) & (samples[:, 0] <= s["t1"] + 0.2), 1]
        stages.append(
            {
                "stage": s["stage"],
                "dataset": s["dataset"],
                "seconds": s["t1"] - s["t0"],
                "shards": s["shards"],
                "peak": float(inside.max()) if len(inside) else None,
            }
        )
    print(json.dumps({"wall": wall, "peak": float(samples[:, 1].max()), "stages": stages}))
    return 0


def run_size(args: argparse.Namespace, root: Path, mono_rows: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--data",
        str(args.data),
        "--cache",
        str(root / f"cache-{mono_rows}"),
        "--pairs",
        str(args.pairs),
        "--mono-rows",
        str(mono_rows),
        "--shard",
        str(args.shard),
        "--workers",
        str(args.workers),
        "--budget-ratio",
        str(args.budget_ratio),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not last.startswith("{"):
        raise SystemExit(f"the run with {mono_rows:,} monolingual sentences failed:\n{out.stderr[-4000:]}")
    return json.loads(last)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=4_500_000)
    ap.add_argument("--mono", default="10000000,40000000", help="monolingual sizes, comma-separated")
    ap.add_argument("--budget-ratio", type=float, default=0.2, help="the sample: 0.2 of 40M is the thesis' 8M")
    ap.add_argument("--shard", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--data",
        type=Path,
        default=Path("/tmp/augdag-thesis-scale-data"),
        help="where the generated corpora are kept between runs",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--mono-rows", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    sizes = [int(x) for x in args.mono.split(",")]
    t0 = time.perf_counter()
    write_bitext(args.data / f"bitext-{args.pairs}", args.pairs)
    for m in sizes:
        write_mono(args.data / f"mono-{m}", m)
    print(f"data written in {time.perf_counter() - t0:.0f} s under {args.data}")
    results = {}
    with workdir("thesis-scale") as root:
        for m in sizes:
            r = results[m] = run_size(args, root, m)
            print(
                f"\n{args.pairs:,} pairs + {m:,} monolingual sentences: wall {r['wall'] / 60:.1f} min, "
                f"peak RSS {r['peak'] / 1e9:.2f} GB"
            )
            print(f"  {'stage':<18} {'dataset':<8} {'shards':>6} {'seconds':>9} {'peak GB':>8}")
            for s in r["stages"]:
                peak = f"{s['peak'] / 1e9:.2f}" if s["peak"] is not None else "-"
                print(f"  {s['stage']:<18} {s['dataset'] or '':<8} {s['shards']:>6} {s['seconds']:>9.1f} {peak:>8}")
    peaks = [results[m]["peak"] for m in sizes]
    flat = max(peaks) / min(peaks)
    ok = max(peaks) <= RSS_GOAL and flat <= FLAT_GOAL and max(r["wall"] for r in results.values()) <= WALL_GOAL_S
    print(
        f"\npeak RSS {max(peaks) / 1e9:.2f} GB (goal <= {RSS_GOAL / 1e9:.0f}); largest / smallest monolingual size's "
        f"peak {flat:.2f} (goal <= {FLAT_GOAL}); slowest run {max(r['wall'] for r in results.values()) / 60:.1f} min "
        f"(goal <= {WALL_GOAL_S / 60:.0f}): {'OK' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
