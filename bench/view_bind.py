"""Binding a catalog view over many parts on an object store (issue 29, docs/scale.md "what breaks first").

DuckDB binds every query on a view again: a list of Parquet files by its first file's footer, or, with
``union_by_name``, by every file's. On an object store each footer is a HEAD and a ranged GET. The baseline is the
view as it was built before manifests recorded whether an artifact's parts share one schema (every part read by
name); the other is the view today (such an artifact read on its own, bound from its first part). Same artifact,
same store (moto's S3 server on 127.0.0.1), a fresh process's first query that only binds the view
(``WHERE false``), as `augdag sql` runs one.

    .venv/bin/python bench/view_bind.py --parts 1000
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from pathlib import Path

import pyarrow as pa

from bench.common import workdir
from bench.scale_out import REQUEST, start_moto


def build(root: Path, store: str, parts: int) -> tuple[Path, Path]:
    """One `bitext` artifact of ``parts`` one-row parts on the store, registered in two catalogs: ``today`` with
    its manifest as written now, ``before`` with the manifest's ``uniform`` dropped (what an older one lacks)."""
    from storage import objects
    from storage.artifacts import ArtifactRef, write_manifest
    from storage.catalog import Catalog
    from tasks.runtime.stage import commit_shard

    ref = ArtifactRef(str(root / "unused"), "clean", "c" * 32, "bitext", "bench", parts, store)
    objects.use(store)
    for shard in range(parts):
        row = {"uid": f"u{shard}", "src": f"source {shard}", "tgt": f"target {shard}", "source": "bench", "line": shard + 1}
        commit_shard(ref, shard, {"part": pa.Table.from_pylist([row])})
    manifest = write_manifest(ref, version="1", params={})
    today, before = root / "today", root / "before"
    Catalog(today).register(ref, manifest, run_id="bench")
    Catalog(before).register(ref, {k: v for k, v in manifest.items() if k != "uniform"}, run_id="bench")
    return today, before


def bind(cache: Path, log: Path) -> tuple[float, collections.Counter]:
    """A first query that binds `bitext` in a process that knows nothing of the store yet: (seconds, requests)."""
    from storage import objects
    from storage.catalog import Catalog

    objects.reset()
    user = Catalog(cache)
    start = log.stat().st_size
    t0 = time.perf_counter()
    user.query("SELECT count(*) AS n FROM bitext WHERE false", sandbox=True)
    seconds = time.perf_counter() - t0
    time.sleep(0.2)  # the server's log line of the last request
    with open(log, "rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    return seconds, collections.Counter(m[1] for line in lines if (m := REQUEST.search(line)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    a = parser.parse_args()
    with workdir("augdag-bench-view-bind") as root:
        proc, env, log = start_moto(root)
        try:
            os.environ.update(env)
            today, before = build(root, "s3://augdag-bench/views", a.parts)
            results = {}
            for name, cache in (("every part by name (before)", before), ("one footer per artifact", today)):
                runs = [bind(cache, log) for _ in range(a.repeat)]
                results[name] = min(runs, key=lambda r: r[0])
        finally:
            proc.kill()
            proc.wait()
    print(f"view_bind: the first query on a view over {a.parts:,} parts of one artifact on S3 (moto), best of {a.repeat}")
    for name, (seconds, requests) in results.items():
        print(f"  {name:<30}{seconds:>8.2f} s  {sum(requests.values()):>6,} requests ({dict(sorted(requests.items()))})")
    (slow, _), (fast, _) = results.values()
    print(f"view_bind: {slow / fast:.1f}x faster than binding every part by name")


if __name__ == "__main__":
    main()
