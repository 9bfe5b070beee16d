"""A fully cached run costs seconds: `augdag run ingest` and `augdag nightly` on a filled demo cache, against
`augdag sql "select 1"` on the same cache (goals: ingest <= 3x, the nightly <= 5x; issue 25).

All three are the CLI as a user types it, each in a fresh process, timed from outside (best of ``--repeat``).
The cache is filled first by one `augdag nightly --config demo` (the full demo, ~3.5 min; ``--profile tiny``:
demo/tiny.py's sizes, ~2 min), or taken as it is with ``--cache`` (filled by an earlier run of this script or
by `augdag demo`). A cached run replays its flow without starting Prefect (flows/engine/replay.py); the script checks
that each timed run computed no shard and is recorded in the catalog (`augdag runs`). Exits 1 when a goal is
missed.

    .venv/bin/python bench/noop.py                    # the full demo profile
    .venv/bin/python bench/noop.py --profile tiny --keep
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import workdir
from demo.tiny import TINY_SETS
from storage.catalog import Catalog

GOALS = {"ingest": 3.0, "nightly": 5.0}


def augdag(cache: Path, *args: str) -> float:
    """Run `augdag ARGS --cache CACHE` in a fresh process; its wall time in seconds (exit 0 required)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args, "--cache", str(cache)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "AUGDAG_DEMO_DATA": str(cache / "demo-data")},
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"augdag {' '.join(args)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return seconds


def best(repeat: int, cache: Path, *args: str) -> float:
    return min(augdag(cache, *args) for _ in range(repeat))


def last_run(cache: Path, pipeline: str) -> dict:
    """The newest run of ``pipeline``: its status and the shards its stages computed."""
    row = (
        Catalog(cache)
        .query("SELECT run_id, status, summary FROM runs WHERE pipeline = $p ORDER BY started_at DESC LIMIT 1", {"p": pipeline})
        .to_pylist()[0]
    )
    summary = json.loads(row["summary"] or "{}")
    stages = [s for child in summary.get("pipelines", [summary]) for s in child.get("stages", [])]
    return {"run_id": row["run_id"], "status": row["status"], "computed": sum(s["shards_computed"] for s in stages)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=("demo", "tiny"), default="demo")
    ap.add_argument("--cache", type=Path, help="a filled demo cache to time (default: a new one, filled first)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the new cache")
    a = ap.parse_args(argv)
    sets = [x for s in (TINY_SETS if a.profile == "tiny" else []) for x in ("--set", s)]
    with workdir("noop", keep=a.keep or a.cache is not None) as root:
        cache = a.cache or root / "cache"
        fill = augdag(cache, "nightly", "--config", "demo", *sets, "-q")
        print(f"filled {cache} ({a.profile}) in {fill:.1f} s")
        sql = best(a.repeat, cache, "sql", "select 1")
        ok = True
        for name, command in (("ingest", ("run", "ingest")), ("nightly", ("nightly",))):
            seconds = best(a.repeat, cache, *command, "--config", "demo", *sets, "-q")
            run = last_run(cache, name)  # before the next command's runs (a nightly has an ingest run too)
            if run["status"] != "completed" or run["computed"]:
                print(
                    f"{name}: run {run['run_id']} is {run['status']} with {run['computed']} shards computed; "
                    "expected a completed run that computed none"
                )
                ok = False
            ratio = seconds / sql
            ok &= ratio <= GOALS[name]
            print(
                f'cached {name} ({a.profile}): {seconds:.2f} s = {ratio:.1f}x `augdag sql "select 1"` '
                f"({sql:.2f} s; goal <= {GOALS[name]:g}x), recorded as {run['run_id']}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
