"""Ingest of N seeded demo pairs: throughput, orchestration overhead and peak memory, one line per claim.

throughput: ``read_dataset`` + ``find_duplicates`` + ``clean`` (the stage functions, no Prefect, read parts
    written for the duplicate reduce) against ``pyarrow.csv`` reading the same two files as one string column
    each (no quoting, ``\\x1f`` as the delimiter) in the same process: rows/s of each, best of ``--repeat``.
    No goal: the baseline only splits lines; ours also validates, hashes a uid per pair, deduplicates and filters.
overhead: ``ingest_flow`` (Prefect, manifests with sha256, catalog, input hashing) against the same stage
    functions called directly on the same shards with the same Parquet writes (read parts + rejects ->
    duplicates over the parts -> clean per shard, kept + dropped): wall time over pure stage time, both with
    ``--workers`` threads for the flow (default 1, so both run the shards one after another); server start-up
    excluded; the flow's clean parts must be byte-identical to the direct ones. Goal: <= 10 %.
memory: ``ingest_flow`` as `augdag run ingest` runs it (one thread per core) over ``--mem-rows`` pairs in a
    fresh subprocess; its peak RSS (``ru_maxrss`` of that process; the Prefect server, a process of its own,
    is reported beside it). Goal: <= 1.5 GB. The input (~0.75 GB at 10M) and the cache are deleted afterwards.

    .venv/bin/python bench/ingest.py --only throughput --rows 1000000
    .venv/bin/python bench/ingest.py --only overhead --rows 1000000
    .venv/bin/python bench/ingest.py --only memory --mem-rows 10000000

Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pv
import pyarrow.parquet as pq

from bench.common import (
    DATASET,
    bench_conf,
    demo_pairs,
    prefect_server,
    run_ingest,
    stage_rows,
    timed,
    workdir,
)
from conf.schema import AugdagConf, CleanConf, DatasetConf
from storage.artifacts import hash_file, write_part
from storage.parts import Parts
from storage.readers.dataset import read_dataset
from tasks.ingest.clean import clean, find_duplicates

OVERHEAD_GOAL = 0.10
MEMORY_GOAL_BYTES = 1.5e9


# --- throughput ---------------------------------------------------------------------------------------------------


def pyarrow_csv_lines(path: Path) -> pa.ChunkedArray:
    """The baseline: every line of ``path`` as one string column, nothing checked."""
    table = pv.read_csv(
        path,
        read_options=pv.ReadOptions(column_names=["line"]),
        parse_options=pv.ParseOptions(delimiter="\x1f", quote_char=False, escape_char=False),
        convert_options=pv.ConvertOptions(column_types={"line": pa.string()}),
    )
    return table["line"]


def baseline_read(ds: DatasetConf) -> int:
    src, tgt = pyarrow_csv_lines(ds.src), pyarrow_csv_lines(ds.tgt)
    return min(len(src), len(tgt))


def stages_in_memory(ds: DatasetConf, parts: Path, clean_conf: CleanConf, *, shard_size: int) -> dict[str, int]:
    """read_dataset -> (read parts on disk for the reduce) find_duplicates -> clean per batch; rows by role."""
    parts.mkdir(parents=True, exist_ok=True)
    batches, paths = [], []
    for b in read_dataset(DATASET, ds, batch_rows=shard_size):
        paths.append(parts / f"part-{b.index:05d}.parquet")
        write_part(b.rows, paths[-1])
        batches.append(b)
    dups = find_duplicates(Parts(tuple(paths)))
    rows = {"input": 0, "rejects": 0, "part": 0, "dropped": 0}
    for b in batches:
        out = clean(b.rows, dups, kind=ds.kind, **clean_conf.model_dump())
        rows["input"] += b.n_input
        rows["rejects"] += b.rejects.num_rows
        rows["part"] += out["part"].num_rows
        rows["dropped"] += out["dropped"].num_rows
    return rows


def throughput(root: Path, n: int, *, seed: int, shard_size: int, repeat: int) -> None:
    ds = demo_pairs(root / "data", n, seed=seed)
    clean_conf = AugdagConf().ingest.clean
    rows = stages_in_memory(ds, root / "check", clean_conf, shard_size=shard_size)
    assert baseline_read(ds) == rows["input"] == n, (n, rows)  # same input rows on both sides
    assert rows["part"] + rows["dropped"] + rows["rejects"] == n, rows  # kept + dropped + rejected
    base_s, ours_s = [], []
    for i in range(repeat):  # interleaved, so both see the same machine load
        base_s.append(timed(baseline_read, ds)[1])
        ours_s.append(timed(stages_in_memory, ds, root / f"parts-{i}", clean_conf, shard_size=shard_size)[1])
    base, ours = n / min(base_s), n / min(ours_s)
    print(
        f"throughput n={n:,}: read_dataset + duplicates + clean {ours:,.0f} pairs/s, pyarrow.csv read of both "
        f"files {base:,.0f} pairs/s = {ours / base:.2f}x the baseline's rate (best of {repeat}; no goal, "
        f"{rows['part']:,} kept, {rows['dropped']:,} dropped)"
    )


# --- overhead -----------------------------------------------------------------------------------------------------


def stages_direct(ds: DatasetConf, out: Path, conf: AugdagConf) -> dict[str, dict[str, int]]:
    """The flow's stage work without Prefect, manifests or catalog: the same reads, functions and part writes."""
    read_dir, dups_dir, clean_dir = out / "read", out / "duplicates", out / "clean"
    rows = {"read": {"part": 0, "rejects": 0}, "duplicates": {"part": 0}, "clean": {"part": 0, "dropped": 0}}
    n_shards = 0
    for b in read_dataset(DATASET, ds, max_line_chars=conf.ingest.max_line_chars, batch_rows=conf.shard_size):
        write_part(b.rejects, read_dir / f"rejects-{b.index:05d}.parquet")
        write_part(b.rows, read_dir / f"part-{b.index:05d}.parquet")
        rows["read"]["part"] += b.rows.num_rows
        rows["read"]["rejects"] += b.rejects.num_rows
        n_shards += 1
    dups = find_duplicates(Parts(tuple(read_dir / f"part-{i:05d}.parquet" for i in range(n_shards))))
    write_part(dups, dups_dir / "part-00000.parquet")
    rows["duplicates"]["part"] = dups.num_rows
    for i in range(n_shards):
        side = pq.read_table(dups_dir / "part-00000.parquet")  # the flow reads its side input per shard too
        kept = clean(pq.read_table(read_dir / f"part-{i:05d}.parquet"), side, kind=ds.kind, **conf.ingest.clean.model_dump())
        write_part(kept["dropped"], clean_dir / f"dropped-{i:05d}.parquet")
        write_part(kept["part"], clean_dir / f"part-{i:05d}.parquet")
        rows["clean"]["part"] += kept["part"].num_rows
        rows["clean"]["dropped"] += kept["dropped"].num_rows
    return rows


def clean_parts_identical(summary: dict, direct: Path) -> bool:
    """The flow's clean parts (by the sha256 in its manifest) are byte-identical to the direct ones."""
    [stage] = [s for s in summary["stages"] if s["stage"] == "clean"]
    manifest = json.loads((Path(summary["cache"]) / "artifacts" / "clean" / stage["fingerprint"] / "manifest.json").read_text())
    return all(f["sha256"] == hash_file(direct / "clean" / f["file"]) for f in manifest["files"])


def overhead(root: Path, n: int, *, seed: int, shard_size: int, workers: int, repeat: int) -> bool:
    ds = demo_pairs(root / "data", n, seed=seed)
    flow_s, direct_s, stage_s = [], [], {}
    with prefect_server(root):
        run_ingest(bench_conf(root / "warm-cache", demo_pairs(root / "warm-data", 1000, seed=seed)))  # first-call costs
        for i in range(repeat):  # interleaved, fresh outputs each time
            direct, seconds = timed(stages_direct, ds, root / f"direct-{i}", bench_conf(root, ds, shard_size=shard_size))
            direct_s.append(seconds)
            summary, seconds = run_ingest(bench_conf(root / f"cache-{i}", ds, shard_size=shard_size, workers=workers))
            flow_s.append(seconds)
            assert stage_rows(summary) == direct, (stage_rows(summary), direct)  # the same rows per stage and role
            assert clean_parts_identical(summary, root / f"direct-{i}"), "flow and direct clean parts differ"
            stage_s = {s["stage"]: round(s["seconds"], 2) for s in summary["stages"]}
    ratio = min(flow_s) / min(direct_s) - 1
    print(
        f"overhead n={n:,}, shards of {shard_size:,}, {workers} worker(s): ingest_flow {min(flow_s):.2f} s, "
        f"stage functions alone {min(direct_s):.2f} s = +{100 * ratio:.1f} % (goal <= {100 * OVERHEAD_GOAL:.0f} %; "
        f"best of {repeat}; flow stages {stage_s})"
    )
    return ratio <= OVERHEAD_GOAL


# --- memory -------------------------------------------------------------------------------------------------------


def memory_child(data: Path, cache: Path, shard_size: int) -> None:
    """In the subprocess: one ingest run; prints its peak RSS and the server's as one JSON line on stdout."""
    ds = DatasetConf(kind="bitext", format="text", src=data / "train.en", tgt=data / "train.de")
    conf = bench_conf(cache, ds, shard_size=shard_size)
    with prefect_server(cache.parent):
        summary, seconds = run_ingest(conf)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    server = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the server, stopped and reaped
    print(json.dumps({"peak_rss": peak, "server_rss": server, "seconds": seconds, "rows": stage_rows(summary)}))


def memory(root: Path, n: int, *, seed: int, shard_size: int) -> bool:
    t0 = time.perf_counter()
    ds = demo_pairs(root / "data", n, seed=seed)
    gen_s = time.perf_counter() - t0
    log = root / "child.log"
    with open(log, "w") as err:
        done = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(root / "data"), str(root / "cache"), str(shard_size)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    if done.returncode:
        sys.stderr.write(log.read_text()[-4000:])
        raise RuntimeError(f"the memory subprocess failed with exit code {done.returncode}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    rows = got["rows"]
    assert rows["read"]["part"] + rows["read"].get("rejects", 0) == n, rows
    assert rows["clean"]["part"] + rows["clean"]["dropped"] == rows["read"]["part"], rows
    input_gb = sum(p.stat().st_size for p in ds.files()) / 1e9
    print(
        f"memory n={n:,} ({input_gb:.2f} GB of input, written in {gen_s:.0f} s): ingest process peak RSS "
        f"{got['peak_rss'] / 1e9:.2f} GB (goal <= {MEMORY_GOAL_BYTES / 1e9:.1f} GB), Prefect server "
        f"{got['server_rss'] / 1e9:.2f} GB; run {got['seconds']:.0f} s"
    )
    return got["peak_rss"] <= MEMORY_GOAL_BYTES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only",
        choices=["throughput", "overhead", "memory"],
        action="append",
        help="run only this part (repeatable); default: all three",
    )
    ap.add_argument("--rows", type=int, default=1_000_000, help="pairs for throughput and overhead")
    ap.add_argument("--mem-rows", type=int, default=10_000_000, help="pairs for memory")
    ap.add_argument("--shard-size", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=1, help="overhead: the flow's task-runner threads")
    ap.add_argument("--repeat", type=int, default=3, help="throughput and overhead: runs of each side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory-child", nargs=3, metavar=("DATA", "CACHE", "SHARD_SIZE"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.memory_child:
        memory_child(Path(a.memory_child[0]), Path(a.memory_child[1]), int(a.memory_child[2]))
        return 0
    parts = a.only or ["throughput", "overhead", "memory"]
    ok = True
    if "throughput" in parts:
        with workdir("throughput") as root:
            throughput(root, a.rows, seed=a.seed, shard_size=a.shard_size, repeat=a.repeat)
    if "overhead" in parts:
        with workdir("overhead") as root:
            ok &= overhead(root, a.rows, seed=a.seed, shard_size=a.shard_size, workers=a.workers, repeat=a.repeat)
    if "memory" in parts:
        with workdir("memory") as root:
            ok &= memory(root, a.mem_rows, seed=a.seed, shard_size=a.shard_size)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
