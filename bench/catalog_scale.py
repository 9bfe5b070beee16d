"""The catalog at the 100M-sentence night's shape (issue 51, docs/scale.md "The catalog and the driver").

Fills a catalog with ``--nights`` nights of synthetic registrations shaped as docs/scale.md's self_training night:
100M monolingual sentences and 50M pairs in shards of 100k (read, clean, duplicates, align, lexicon,
word_uncertainty, uncertainty, sample_keys, sample, sampled_mono, teacher_translate on 20M, synthetic_clean,
lm_score, lm_filter, force_align), every night on new data (new fingerprints: the catalog's worst case), through
storage/catalog.py's own API (``start_run``, ``register`` with lineage and one ``stage_runs`` row per shard,
``finish_run``). The reads reject ``--reject-rate`` of their input lines into rejects parts (Parquet, per shard).
Each part is a hard link to one small file per role (a one-row main part, a dropped part, a rejects part of the
shard's rejected lines), so a night costs inodes, not gigabytes; the catalog sees every part by name as in a real
night, and a registration reads the rejects parts' bytes as it would.

Prints, per night: the rows each catalog table gained, the manifests' JSON bytes, the catalog file's size, the time
of each registration write (median, slowest, and the two reads'), then the time of three typical user queries
through the sandbox `augdag sql` uses (snapshot, integrity check, views), and the baseline: what copying one night's
rejected lines into the catalog (the version before issue 51) costs, in time under the write lock and in bytes.

    .venv/bin/python bench/catalog_scale.py --nights 3
    .venv/bin/python bench/catalog_scale.py --nights 1 --pairs 5000000 --mono 10000000   # a quick look
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from bench.common import workdir

# (stage, view, dataset, shards: "mono" | "pairs" | "synthetic" | 1, side roles, parents as stage:dataset)
NIGHT = [
    ("read", None, "crawl_mono", "mono", ("rejects",), ()),
    ("clean", "mono", "crawl_mono", "mono", ("dropped",), ("read:crawl_mono",)),
    ("duplicates", None, "crawl_mono", 1, (), ("read:crawl_mono",)),
    ("read", None, "crawl_bitext", "pairs", ("rejects",), ()),
    ("clean", "bitext", "crawl_bitext", "pairs", ("dropped",), ("read:crawl_bitext",)),
    ("align", "alignments", "crawl_bitext", 1, (), ("clean:crawl_bitext",)),
    ("lexicon", "lexicon", "crawl_bitext", 1, (), ("align:crawl_bitext",)),
    ("word_uncertainty", "word_uncertainty", "crawl_bitext", 1, (), ("lexicon:crawl_bitext",)),
    ("uncertainty", "uncertainty", "crawl_bitext", "pairs", (), ("clean:crawl_bitext", "word_uncertainty:crawl_bitext")),
    ("uncertainty", "uncertainty", "crawl_mono", "mono", (), ("clean:crawl_mono", "word_uncertainty:crawl_bitext")),
    ("sample_keys", None, "crawl_mono", "mono", (), ("uncertainty:crawl_mono",)),
    ("sample", None, "crawl_mono", 1, (), ("sample_keys:crawl_mono",)),
    ("sampled_mono", "sampled_mono", "crawl_mono", "mono", (), ("sample:crawl_mono", "clean:crawl_mono")),
    ("teacher_translate", None, "crawl_mono", "synthetic", (), ("sampled_mono:crawl_mono",)),
    ("synthetic_clean", None, "crawl_mono", "synthetic", ("dropped",), ("teacher_translate:crawl_mono",)),
    ("lm_score", None, "crawl_mono", "synthetic", (), ("synthetic_clean:crawl_mono",)),
    ("lm_filter", "synthetic", "crawl_mono", "synthetic", ("dropped",), ("lm_score:crawl_mono",)),
    ("force_align", None, "crawl_mono", 1, (), ("lm_filter:crawl_mono",)),
]
REASONS = ("empty", "nul_byte", "too_long", "invalid_utf8", "column_count")


def templates(base: Path, rejected: int) -> dict[str, Path]:
    """One file per (role, kind): what every part of that role is a hard link to."""
    from storage.artifacts import write_part
    from storage.schemas import BITEXT, MONO, REJECTS

    base.mkdir(parents=True)
    one = {"uid": "0" * 32, "source": "crawl", "line": 1}
    tables = {
        "part-bitext": pa.Table.from_pylist([{**one, "src": "a b c", "tgt": "x y z"}], BITEXT),
        "part-mono": pa.Table.from_pylist([{**one, "text": "a b c"}], MONO),
        "part-other": pa.table({"uid": ["0" * 32], "value": [0.5]}),
        "dropped": pa.table({"uid": ["0" * 32], "source": ["crawl"], "line": [2], "reason": ["duplicate"]}),
        "rejects": pa.table(
            {
                "source": ["crawl"] * rejected,
                "file": ["crawl.txt"] * rejected,
                "line": pa.array(range(1, rejected + 1), pa.int64()),
                "reason": [REASONS[i % len(REASONS)] for i in range(rejected)],
                "detail": [f"crawl.txt:{i + 1}: {REASONS[i % len(REASONS)]}" for i in range(rejected)],
                "content": [f"line {i + 1} of a crawled page, kept as the reader saw it " * 2 for i in range(rejected)],
            },
            schema=REJECTS,
        ),
    }
    paths = {}
    for name, table in tables.items():
        paths[name] = base / f"{name}.parquet"
        write_part(table, paths[name])
    return paths


def night(cat, root: Path, files: dict[str, Path], n: int, shards: dict[str, int]) -> dict:
    """Register night ``n``; returns its figures."""
    from storage.artifacts import ArtifactRef, write_manifest

    run = f"nightly-{n:04d}"
    cat.start_run(run, pipeline="self_training", profile="bench", config={}, flow_run_id=None)
    fps: dict[str, str] = {}
    times, cpu, manifest_bytes, reads = [], [], [], {}
    for stage, view, dataset, size, roles, parents in NIGHT:
        count = size if isinstance(size, int) else shards[size]
        fp = hashlib.md5(f"{n}:{stage}:{dataset}".encode()).hexdigest()
        fps[f"{stage}:{dataset}"] = fp
        ref = ArtifactRef(str(root), stage, fp, view, dataset, count)
        Path(ref.dir).mkdir(parents=True)
        main = files["part-bitext" if view == "bitext" else "part-mono" if view == "mono" else "part-other"]
        for shard in range(count):
            os.link(main, ref.path(shard))
            for role in roles:
                os.link(files[role], ref.path(shard, role))
        manifest = write_manifest(ref, version="1", params={"night": n})
        manifest_bytes.append(len((Path(ref.dir) / "manifest.json").read_bytes()))
        now = datetime.now(UTC).isoformat()
        stage_runs = [
            {"run_id": run, "stage": stage, "dataset": dataset, "fingerprint": fp, "shard": s, "status": "completed"}
            | {"started_at": now, "seconds": 1.0, "rows_in": 100_000, "rows_out": 100_000}
            for s in range(count)
        ]
        t0, c0 = time.perf_counter(), time.process_time()
        cat.register(ref, manifest, run_id=run, parents=[fps[p] for p in parents], stage_runs=stage_runs)
        times.append((time.perf_counter() - t0, f"{stage}:{dataset}"))
        cpu.append(time.process_time() - c0)
        if "rejects" in roles:
            reads[dataset] = (times[-1][0], cpu[-1], count)
    cat.finish_run(run, status="completed", summary={})
    return {"run": run, "times": times, "cpu": cpu, "manifest_bytes": manifest_bytes, "reads": reads}


def table_rows(cat, run: str) -> dict[str, int]:
    q = (
        "SELECT (SELECT count(*) FROM artifacts WHERE created_run = $r) AS artifacts, (SELECT count(*) FROM lineage l "
        "JOIN artifacts a ON a.fingerprint = l.child WHERE a.created_run = $r) AS lineage, (SELECT count(*) FROM "
        "stage_runs WHERE run_id = $r) AS stage_runs, (SELECT count(*) FROM reject_counts WHERE run_id = $r) AS "
        "reject_counts, (SELECT count(*) FROM runs) AS runs_total, (SELECT count(*) FROM stage_runs) AS stage_runs_total"
    )
    return cat.query(q, {"r": run}).to_pylist()[0]


def best_of(k: int, fn) -> tuple[float, float]:
    """The best wall and CPU seconds of ``k`` calls (the CPU time of this process, DuckDB's threads included: the
    measure that a machine shared with other work leaves meaningful)."""
    out = []
    for _ in range(k):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out.append((time.perf_counter() - t0, time.process_time() - c0))
    return min(w for w, _ in out), min(c for _, c in out)


def queries(root: Path, last: str) -> None:
    """Three user queries through the sandbox (`augdag sql`'s path), each in a fresh ``Catalog`` (a new process's)."""
    from storage.catalog import Catalog

    for label, sql in [
        ("count(*) FROM bitext", "SELECT count(*) AS n FROM bitext"),
        ("README: rejects per source, reason", "SELECT source, reason, count(*) AS n FROM rejects GROUP BY ALL ORDER BY n DESC"),
        ("a night's stage_runs per stage", f"SELECT stage, count(*) AS n FROM stage_runs WHERE run_id = '{last}' GROUP BY ALL"),
    ]:
        (first, first_cpu) = best_of(1, lambda sql=sql: Catalog(root).query(sql, sandbox=True))
        (warm, warm_cpu) = best_of(3, lambda sql=sql: Catalog(root).query(sql, sandbox=True))
        rows = Catalog(root).query(sql, sandbox=True).num_rows
        print(
            f"  query {label}: first {first * 1000:.0f} ms ({first_cpu * 1000:.0f} ms CPU), then {warm * 1000:.0f} ms "
            f"({warm_cpu * 1000:.0f} ms CPU; best of 3), {rows} row(s)"
        )


def baseline(root: Path, work: Path, run: str) -> None:
    """The version before issue 51: the night's rejected lines copied into a `rejects` table under the write lock."""
    from storage.catalog import Catalog

    reads = (
        Catalog(root)
        .query("SELECT fingerprint, path, n_shards FROM artifacts WHERE created_run = $r AND stage = 'read'", {"r": run})
        .to_pylist()
    )
    files = [str(root / r["path"] / f"rejects-{s:05d}.parquet") for r in reads for s in range(r["n_shards"])]
    copy = work / "before.duckdb"
    shutil.copy(root / "catalog.duckdb", copy)
    size0 = copy.stat().st_size
    with duckdb.connect(str(copy)) as con:
        con.execute(
            "CREATE TABLE rejects_copied (fingerprint VARCHAR, source VARCHAR, file VARCHAR, line BIGINT, reason "
            "VARCHAR, detail VARCHAR, content VARCHAR)"
        )
        t0, c0 = time.perf_counter(), time.process_time()
        con.execute(
            "INSERT INTO rejects_copied SELECT 'f', source, file, line, reason, detail, content FROM read_parquet($p)",
            {"p": files},
        )
        con.execute("CHECKPOINT")
        took, took_cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = con.execute("SELECT count(*) FROM rejects_copied").fetchone()[0]
    grown = copy.stat().st_size - size0
    print(
        f"  baseline (before issue 51): copying the night's {rows:,} rejected lines into the catalog: {took:.2f} s "
        f"({took_cpu:.2f} s CPU) under the write lock, +{grown / 2**20:.0f} MiB of catalog a night"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nights", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=50_000_000)
    ap.add_argument("--mono", type=int, default=100_000_000)
    ap.add_argument("--synthetic", type=int, default=20_000_000)
    ap.add_argument("--shard", type=int, default=100_000)
    ap.add_argument("--reject-rate", type=float, default=0.02, help="share of each read's input lines refused")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    from storage.catalog import Catalog

    shards = {
        k: max(1, -(-n // args.shard)) for k, n in (("mono", args.mono), ("pairs", args.pairs), ("synthetic", args.synthetic))
    }
    parts = sum((s if isinstance(s, int) else shards[s]) * (1 + len(roles)) for _, _, _, s, roles, _ in NIGHT)
    print(
        f"catalog at scale: {args.nights} night(s) of {args.mono:,} sentences + {args.pairs:,} pairs, shards of "
        f"{args.shard:,}: {len(NIGHT)} artifacts, {parts:,} parts a night; reject rate {args.reject_rate:.0%}"
    )
    with workdir("catalog_scale", keep=args.keep) as work:
        root = work / "cache"
        files = templates(work / "templates", int(args.shard * args.reject_rate))
        cat = Catalog(root)
        for n in range(args.nights):
            got = night(cat, root, files, n, shards)
            rows = table_rows(cat, got["run"])
            t, cpu = [w for w, _ in got["times"]], got["cpu"]
            slowest = max(got["times"])
            size = (root / "catalog.duckdb").stat().st_size
            print(
                f"night {n + 1}: +{rows['artifacts']} artifacts, +{rows['lineage']} lineage, +{rows['stage_runs']:,} "
                f"stage_runs, +{rows['reject_counts']} reject_counts (stage_runs in all {rows['stage_runs_total']:,}); "
                f"manifests {sum(got['manifest_bytes']) / 1024:.0f} KiB (largest {max(got['manifest_bytes']) / 1024:.0f} "
                f"KiB); catalog {size / 2**20:.1f} MiB"
            )
            reads = ", ".join(
                f"{ds} ({k:,} rejects parts) {s * 1000:.0f} ms ({c * 1000:.0f} ms CPU)"
                for ds, (s, c, k) in sorted(got["reads"].items())
            )
            print(
                f"  registration writes: median {statistics.median(t) * 1000:.0f} ms ({statistics.median(cpu) * 1000:.0f} ms "
                f"CPU), slowest {slowest[0] * 1000:.0f} ms ({slowest[1]}), all {sum(t):.1f} s ({sum(cpu):.1f} s CPU); the "
                f"reads: {reads}"
            )
        queries(root, got["run"])
        baseline(root, work, got["run"])


if __name__ == "__main__":
    main()
