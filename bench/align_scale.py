"""The aligner's EM over shards (issue 51) against the one-process aligner, on the thesis-shaped bitext.

The bitext is made as bench/thesis_scale.py makes it (demo pairs joined into lines of ~25 tokens, pre-tokenised),
``--pairs`` of them, ingested once (threads, in a child process: the driver's peak is then the rounds'; not timed).
Then, in two ways on the same 2 cores:

- one process: ``tasks.self_training.alignment.align_bitext`` (the `align` stage before issue 51) in a child
  process on 2 threads; its wall time and peak RSS (VmHWM);
- the rounds (tasks/self_training/em.py ``align_rounds``) in a flow on 2 Dask workers of one thread each, started with
  ``memory_limit`` 2 GB (a worker over it is restarted, and the run fails): the rounds' wall time and the peak RSS of
  every process (each worker, each nanny, the driver).

It prints the time ratio (goal <= 1.3x), each peak (goal <= 2 GB) and the share of pairs whose links are identical
(the one-process aligner sums its counts in 8 chunks of equal cells, the rounds part by part: θ differs in the last
bits, so a link may differ where two source words tie within them). Exits 1 when a goal is missed.

    .venv/bin/python bench/align_scale.py --pairs 500000          # 5 parts of 100k; ~10 min on 2 cores
    .venv/bin/python bench/align_scale.py                         # the thesis' 4.5M pairs (45 parts)
    .venv/bin/python bench/align_scale.py --pairs 20000000 --rounds-only   # 200 parts; no one-process run (it would
                                                                  # need ~24 GB): time, every peak, parts written
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import prefect_server, workdir
from bench.thesis_scale import write_bitext
from conf.schema import AugdagConf, DatasetConf, TaskRunnerConf
from storage.artifacts import ArtifactRef

RSS_GOAL, RATIO_GOAL = 2e9, 1.3


def peak_rss() -> int:
    """This process' peak resident set (VmHWM), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds() -> float:
    """CPU seconds (user + system) this process has used."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def conf_of(cache: Path, data: Path, shard: int, runner: TaskRunnerConf) -> AugdagConf:
    ds = DatasetConf(kind="bitext", format="text", src=data / "train.en", tgt=data / "train.de")
    return AugdagConf(cache=cache, shard_size=shard, task_runner=runner, datasets={"bitext": ds})


@functools.cache
def aligned_flow():
    """The flow: the bitext ingested (cached after the first time), then, with ``rounds``, aligned in EM rounds (timed).
    Made on first use, after ``flows`` has set its offline defaults for Prefect."""
    from prefect import flow

    from flows.engine.driver import Run, run_stage
    from flows.pipelines.ingest import ingest_dataset
    from tasks.self_training.em import align_rounds

    @flow(name="align_scale")
    def aligned(conf: AugdagConf, rounds: bool) -> dict:
        with Run.started(conf, pipeline="align_scale", profile="bench", config=None) as run:
            bitext = ingest_dataset(run, conf, "bitext")
            t0, c0 = time.perf_counter(), cpu_seconds()
            align = align_rounds(functools.partial(run_stage, run), bitext) if rounds else None
            seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        return {**run.finish(), "bitext": bitext, "align": align, "seconds": seconds, "cpu": cpu}

    return aligned


def ingest(args: argparse.Namespace) -> int:
    """Child: the bitext under ``args.ingest`` ingested into the cache on threads; prints its ArtifactRef as JSON."""
    from flows.engine.runners import run_flow

    conf = conf_of(Path(args.cache), Path(args.ingest), args.shard, TaskRunnerConf(kind="threads"))
    print(json.dumps(run_flow(aligned_flow(), conf, rounds=False)["bitext"].__dict__))
    return 0


def one_process(args: argparse.Namespace) -> int:
    """Child: the one-process aligner over the ingested bitext's parts; writes its links, prints wall and peak."""
    from tasks.self_training.alignment import align_bitext

    ref = ArtifactRef(**json.loads(args.one_process))
    t0, c0 = time.perf_counter(), cpu_seconds()
    out = align_bitext(ref.parts())
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    pq.write_table(out["part"].select(["uid", "links"]), Path(args.cache) / "one_process_links.parquet")
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak": peak_rss()}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=4_500_000)
    ap.add_argument("--shard", type=int, default=100_000, help="shard_size: pairs per part")
    ap.add_argument("--data", default="/tmp/augdag-bench-data", help="where the bitext is written once per size")
    ap.add_argument("--memory-limit", default="2GB", help="each Dask worker's memory_limit")
    ap.add_argument("--rounds-only", action="store_true", help="skip the one-process aligner and the link check")
    ap.add_argument("--one-process", help=argparse.SUPPRESS)  # child mode: an ArtifactRef as JSON
    ap.add_argument("--ingest", help=argparse.SUPPRESS)  # child mode: the bitext's directory
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_process:
        return one_process(args)
    if args.ingest:
        return ingest(args)
    data = Path(args.data) / f"bitext-{args.pairs}"
    write_bitext(data, args.pairs)
    with workdir("align-scale") as root, prefect_server(root):
        from distributed import Client, LocalCluster
        from prefect.settings import PREFECT_API_URL

        from flows.engine.runners import ONE_CORE_ENV, run_flow

        cache, api = root / "cache", {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
        # the ingest in a child process (threads; 4.5M pairs hold ~3 GB there): the driver's peak is the rounds' alone
        cmd = [sys.executable, __file__, "--ingest", str(data), "--shard", str(args.shard), "--cache", str(cache)]
        ingested = subprocess.run(cmd, capture_output=True, text=True, check=True, env=api)
        bitext = ArtifactRef(**json.loads(ingested.stdout.strip().splitlines()[-1]))
        base = None if args.rounds_only else baseline(bitext, cache)
        env = {**ONE_CORE_ENV, "PREFECT_API_URL": PREFECT_API_URL.value()}
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, memory_limit=args.memory_limit, dashboard_address=None, env=env
            ) as cluster,
            Client(cluster) as client,
        ):
            dask = TaskRunnerConf(kind="dask", address=cluster.scheduler_address, gpu_resource=None)
            before = client.run(cpu_seconds)
            summary = run_flow(aligned_flow(), conf_of(cache, data, args.shard, dask), rounds=True)
            driver = peak_rss()  # the rounds' peak: before the check below reads every pair's links here
            worker_cpu = sum(client.run(cpu_seconds).values()) - sum(before.values())
            workers = client.run(peak_rss)
            nannies = client.run(peak_rss, nanny=True)
        align = summary["align"]
        peaks = {**{f"worker {a}": p for a, p in workers.items()}, **{f"nanny {a}": p for a, p in nannies.items()}}
        peaks["driver"] = driver
        parts = {d.name: sum(1 for _ in d.rglob("*.parquet")) for d in sorted((cache / "artifacts").glob("align*"))}
        same = None if base is None else identical_links(align, cache)
    print(f"align_scale: {args.pairs:,} thesis pairs in {align.n_shards} parts of {args.shard:,}")
    cpu = worker_cpu + summary["cpu"]
    if base is not None:
        print(f"  one process, 2 threads: {base['seconds']:.1f} s, {base['cpu']:.1f} CPU s, peak {base['peak'] / 1e9:.2f} GB")
    ratio = None if base is None else summary["seconds"] / base["seconds"]
    goal = "" if ratio is None else f": {ratio:.2f}x (goal <= {RATIO_GOAL}x)"
    print(f"  EM rounds, 2 Dask workers (memory_limit {args.memory_limit}): {summary['seconds']:.1f} s{goal}")
    split = f"workers {worker_cpu:.1f} s + driver {summary['cpu']:.1f} s = {cpu:.1f} s"
    print(f"    CPU: {split}" + ("" if base is None else f": {cpu / base['cpu']:.2f}x the one process's"))
    for name, p in sorted(peaks.items()):
        print(f"    peak RSS {name}: {p / 1e9:.2f} GB (goal <= {RSS_GOAL / 1e9:.0f} GB)")
    print("  Parquet parts the rounds wrote: " + ", ".join(f"{stage} {n:,}" for stage, n in parts.items()))
    if same is not None:
        print(f"  identical links: {same[0]:,} of {same[1]:,} pairs ({100 * same[0] / same[1]:.4f} %)")
    stages = [(s["stage"], s["seconds"]) for s in summary["stages"] if s["stage"].startswith("align")]
    print("  rounds: " + ", ".join(f"{n} {t:.1f} s" for n, t in stages))
    missed = (ratio is not None and ratio > RATIO_GOAL) or max(peaks.values()) > RSS_GOAL
    return 1 if missed else 0


def baseline(bitext: ArtifactRef, cache: Path) -> dict:
    """The one-process aligner in a child process: its wall time, CPU seconds and peak RSS."""
    child = subprocess.run(
        [sys.executable, __file__, "--one-process", json.dumps(bitext.__dict__), "--cache", str(cache)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(child.stdout.strip().splitlines()[-1])


def identical_links(align: ArtifactRef, cache: Path) -> tuple[int, int]:
    """How many pairs the rounds link exactly as the one-process aligner did, of how many (the rows checked to be the
    same, in order)."""
    ours = pa.concat_tables(align.read(i).select(["uid", "links"]) for i in range(align.n_shards))
    theirs = pq.read_table(cache / "one_process_links.parquet")
    assert ours["uid"].equals(theirs["uid"]), "the rounds' rows are not the one-process aligner's rows, in order"
    return pc.sum(pc.equal(ours["links"], theirs["links"]).cast(pa.int64())).as_py(), ours.num_rows


if __name__ == "__main__":
    sys.exit(main())
