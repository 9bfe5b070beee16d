"""Scale-out with artifacts on an object store (issue 29): one ingest + self_training night of the demo profile on
(a) threads with a local cache, (b) 2 Dask workers with a local cache, (c) the same 2 workers with every artifact
and model on an S3 server (moto's, on 127.0.0.1). Goal: (c) costs at most 15 % over (b) at 1M pairs.

    .venv/bin/python bench/scale_out.py --pairs 1000000

Each path is `augdag nightly --config demo` as a user runs it (a subprocess; the demo's data written once, its
models at demo/tiny.py's sizes), on a fresh cache (and a fresh store prefix), so every stage and model is computed;
the three paths run in turn, best of ``--repeat`` rounds, and must write the same Parquet bytes. (c) also reports
the object-store requests per shard, counted from the S3 server's request log. Beside them, the machine's
2-process ceiling, measured as bench/scale.py does (two single-core processes running the bare uncertainty stage):
what 2 workers can give on these 2 shared cores at best. moto is a Python server on the same 2 cores: its CPU is
the store's cost here, where a real store's would not be.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.common import prefect_server, workdir
from demo.tiny import TINY_SETS

GOAL = 1.15
THREADS, DASK, S3 = "threads, local cache", "2 Dask workers, local cache", "2 Dask workers, S3"
SETS = [s for s in TINY_SETS if not s.startswith(("demo.", "nightly."))] + ["pipelines=[ingest, self_training]"]
REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) /')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(root: Path) -> tuple[subprocess.Popen, dict[str, str], Path]:
    """moto's S3 server on a free port, a bucket on it; (process, the standard variables, its request log)."""
    import pyarrow.fs as pafs

    port, log = free_port(), root / "moto.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=open(log, "wb"),  # noqa: SIM115 — the server's lifetime
        stderr=subprocess.STDOUT,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
    env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    fs = pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="bench", secret_key="bench", allow_bucket_creation=True
    )
    fs.create_dir("augdag-bench")
    return proc, env, log


def night(root: Path, name: str, data: Path, sets: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """One `augdag nightly` on a fresh cache: (wall seconds, its summary from the catalog)."""
    import json

    from storage.catalog import Catalog

    cache = root / name
    cmd = [sys.executable, "-m", "flows.cli", "nightly", "--config", "demo", "--cache", str(cache)]
    cmd += [a for s in [*SETS, *sets] for a in ("--set", s)]
    t0 = time.perf_counter()
    done = subprocess.run(
        cmd, env={**os.environ, **env, "AUGDAG_DEMO_DATA": str(data), "COLUMNS": "200"}, capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{name}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}")
    (summary,) = Catalog(cache).query("SELECT summary FROM runs WHERE pipeline = 'nightly'")["summary"].to_pylist()
    return seconds, json.loads(summary)


def parquet_hashes(cache: Path, store: str | None, env: dict[str, str]) -> dict[str, str]:
    """Every Parquet part of the night, by key below the cache (or the store), with its sha256."""
    if store is None:
        return {
            str(p.relative_to(cache)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (cache / "artifacts").rglob("*.parquet")
        }
    import pyarrow.fs as pafs

    port = env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="bench", secret_key="bench")
    root = store.removeprefix("s3://")
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if info.path.endswith(".parquet") and "/artifacts/" in info.path:
            with fs.open_input_stream(info.path, compression=None) as f:
                out[info.path[len(root) + 1 :]] = hashlib.sha256(f.read()).hexdigest()
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat; 0 where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shards(summary: dict) -> int:
    return sum(s["shards"] for p in summary["pipelines"] for s in p["stages"] if s.get("kind", "artifact") == "artifact")


def ceiling(root: Path) -> float:
    """One core's seconds over two single-core processes' wall seconds on the bare uncertainty stage (bench/scale.py)."""
    from bench.scale import bare, bare_two_processes, write_input

    mono, words = write_input(root / "ceiling", 2_000_000, 250_000)
    bare(mono, words, 1)  # warm-up: imports, numba's cache
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        bare_two_processes(pool, mono, words)
        one = min(bare(mono, words, 1)[0] for _ in range(2))
        two = min(bare_two_processes(pool, mono, words)[0] for _ in range(2))
    return one / two


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100_000, help="demo bitext pairs (and as many monolingual sentences)")
    ap.add_argument("--shard", type=int, default=25_000, help="shard_size")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", choices=["threads", "dask", "s3"], action="append", help="run only these paths (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (caches, logs, the S3 server's log)")
    a = ap.parse_args()
    with workdir("scale-out", keep=a.keep) as root, prefect_server(root):
        from distributed import LocalCluster
        from prefect.settings import PREFECT_API_URL

        from demo import write_demo
        from flows.engine.runners import ONE_CORE_ENV

        data = root / "data"
        write_demo(data, seed=0, bitext_rows=a.pairs, mono_rows=a.pairs, labeled_rows=100, slots_rows=100, test_rows=300)
        moto, s3, log = start_moto(root)
        api = {"PREFECT_API_URL": PREFECT_API_URL.value()}
        worker_env = {**ONE_CORE_ENV, **api, **s3, "AUGDAG_SCRATCH": str(root / "worker-scratch")}
        sizes = [f"demo.bitext_rows={a.pairs}", f"demo.mono_rows={a.pairs}", "demo.test_rows=300", f"shard_size={a.shard}"]
        try:
            with LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, env=worker_env
            ) as cluster:
                dask = [
                    "task_runner.kind=dask",
                    f"task_runner.address={cluster.scheduler_address}",
                    "task_runner.gpu_resource=null",
                ]
                paths = {
                    THREADS: ([*sizes], {}),
                    DASK: ([*sizes, *dask], {}),
                    S3: ([*sizes, *dask], s3),
                }
                keys = {"threads": THREADS, "dask": DASK, "s3": S3}
                paths = {k: v for k, v in paths.items() if not a.only or k in {keys[o] for o in a.only}}
                best: dict[str, tuple[float, dict]] = {}
                hashes, requests, server_cpu = {}, collections.Counter(), 0.0
                for r in range(a.repeat):
                    for i, (name, (sets, env)) in enumerate(paths.items()):
                        store = f"s3://augdag-bench/r{r}" if env else None
                        run_env = {**api, **env, **({"AUGDAG_ARTIFACTS": store} if store else {})}
                        before, cpu0 = log.read_text(errors="replace").count("\n"), cpu_seconds(moto.pid)
                        seconds, summary = night(root, f"r{r}-{i}", data, sets, run_env)
                        if store:
                            lines = log.read_text(errors="replace").splitlines()[before:]
                            requests = collections.Counter(m[1] for line in lines if (m := REQUEST.search(line)))
                            server_cpu = cpu_seconds(moto.pid) - cpu0
                        hashes[name] = parquet_hashes(root / f"r{r}-{i}", store, s3)
                        if seconds < best.get(name, (float("inf"), {}))[0]:
                            best[name] = (seconds, summary)
        finally:
            moto.terminate()
        reference = next(iter(hashes.values()))
        assert all(h == reference for h in hashes.values()), "the paths wrote different Parquet bytes"
        limit = ceiling(root)
        print(f"work directory: {root}" if a.keep else "", flush=True)
    print(f"scale_out: ingest + self_training of the demo, {a.pairs:,} pairs and {a.pairs:,} sentences, shards of {a.shard:,}")
    print(f"  {'path':<30}{'seconds':>9}")
    for name, (seconds, _) in best.items():
        print(f"  {name:<30}{seconds:>9.1f}")
    print(f"  {len(reference)} Parquet parts, identical on the {len(best)} path(s)")
    if S3 in best:
        n, total = shards(best[S3][1]), sum(requests.values())
        by_method = ", ".join(f"{m} {c}" for m, c in sorted(requests.items()))
        print(f"  object-store requests: {total:,} ({by_method}) for {n} shard tasks: {total / n:.1f} per shard")
        print(f"  the S3 server (moto, Python, on these 2 cores) used {server_cpu:.1f} CPU seconds during the last (c)")
    if THREADS in best and DASK in best:
        print(f"scale_out: threads / 2 Dask workers = {best[THREADS][0] / best[DASK][0]:.2f}x")
    print(f"scale_out: this machine gave 2 bare single-core processes {limit:.2f}x of 1 (the 2-process ceiling)")
    if S3 in best and DASK in best:
        ratio = best[S3][0] / best[DASK][0]
        print(f"scale_out: 2 Dask workers on S3 = {ratio:.3f}x their time on a local cache (goal <= {GOAL:g}x)")
        sys.exit(0 if ratio <= GOAL else 1)


if __name__ == "__main__":  # the guard matters: Dask workers and the pool are spawned processes that import this
    main()
