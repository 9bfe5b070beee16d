"""What proving every part's bytes costs (issue 48, defect 1): a full night and a cached no-op night of the tiny demo
(demo/tiny.py) with the checks on, against the same nights with them off (``AUGDAG_BENCH_UNCHECKED=1``, this
benchmark's knob only). Goal: the checks cost <= 5 % of the full night.

Each night is `augdag nightly --config demo` as a user types it, in a fresh process, timed from outside: the full
nights each in a new cache (median of ``--repeat``, alternating on and off so that load drifts hit both), the cached
ones on the checked night's filled cache (median of ``max(3, --repeat)``, alternating too). Before any figure it
checks that both full nights wrote the same parts (the checks change no byte) and that the cached nights computed
nothing. It also hashes every part of the cache in process, sha256 against xxh3-128 (installed with the environment,
not used), to show what a faster hash would save, and times in process what a cached night's check and `augdag
verify` do over every artifact: on a shared machine those are the figures that load does not blur. Exits 1 when the
goal is missed.

    .venv/bin/python bench/integrity.py              # ~8 min on 2 cores
    .venv/bin/python bench/integrity.py --repeat 2   # two full nights per arm, in alternating order
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import workdir
from demo.tiny import TINY_SETS
from storage.catalog import Catalog
from storage.integrity import UNCHECKED_ENV

GOAL = 0.05  # of the full night


def night(cache: Path, data: Path | None, *, checked: bool) -> float:
    """`augdag nightly --config demo` (tiny) on ``cache`` in a fresh process: its wall time (exit 0 required)."""
    env = {**os.environ, "AUGDAG_DEMO_DATA": str(data or cache / "demo-data"), UNCHECKED_ENV: "0" if checked else "1"}
    sets = [a for s in TINY_SETS for a in ("--set", s)]
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "flows.cli", "nightly", "--config", "demo", *sets, "-q", "--cache", str(cache)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"nightly on {cache} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return seconds


def parts(cache: Path) -> dict[str, str]:
    """Every part of the cache's artifacts: relative path -> sha256 as its manifest records it."""
    out = {}
    for manifest in sorted((cache / "artifacts").glob("*/*/manifest.json")):
        for f in json.loads(manifest.read_text())["files"]:
            out[f"{manifest.parent.relative_to(cache)}/{f['file']}"] = f["sha256"]
    return out


def computed_last_night(cache: Path) -> int:
    """Shards the newest nightly's pipelines computed."""
    (summary,) = Catalog(cache).query("SELECT summary FROM runs WHERE pipeline = 'nightly' ORDER BY started_at DESC LIMIT 1")[0]
    doc = json.loads(summary.as_py())
    return sum(s["shards_computed"] for child in doc.get("pipelines", []) for s in child.get("stages") or [])


def hash_rates(cache: Path, files: list[str]) -> tuple[int, float, float | None]:
    """Bytes of ``files`` and the seconds sha256 and xxh3-128 take over them (read once, hashed in memory)."""
    data = [(cache / f).read_bytes() for f in files]
    t0 = time.perf_counter()
    for d in data:
        hashlib.sha256(d).hexdigest()
    sha = time.perf_counter() - t0
    try:
        import xxhash
    except ImportError:
        return sum(map(len, data)), sha, None
    t0 = time.perf_counter()
    for d in data:
        xxhash.xxh3_128_hexdigest(d)
    return sum(map(len, data)), sha, time.perf_counter() - t0


def check_passes(cache: Path) -> tuple[float, float, int]:
    """Seconds of one memoised check of every artifact (what a cached night does), of one full hash of every file
    (`augdag verify`), each the best of 5; and the number of artifacts."""
    from storage.integrity import verify_artifact

    artifacts = [
        (m.parent, {f["file"]: f["sha256"] for f in json.loads(m.read_text())["files"]})
        for m in sorted((cache / "artifacts").glob("*/*/manifest.json"))
    ]
    best = {}
    for memo in (True, False):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            if any(verify_artifact(cache, d, files, memo=memo) for d, files in artifacts):
                sys.exit(f"{cache}: a part differs from its manifest")
            times.append(time.perf_counter() - t0)
        best[memo] = min(times)
    return best[True], best[False], len(artifacts)


def write_data(root: Path) -> Path:
    """The tiny demo's data, written once for every night (a night that wrote it would be timed for it)."""
    from conf.loader import load_profile
    from flows.engine.nightly import demo_data

    data = root / "demo-data"
    demo_data("demo", load_profile("demo", TINY_SETS, cache=root / "none", environ={"AUGDAG_DEMO_DATA": str(data)}))
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="full nights per arm (cached nights: 3 at least)")
    ap.add_argument("--keep", action="store_true", help="keep the caches")
    a = ap.parse_args(argv)
    with workdir("integrity", keep=a.keep) as root:
        data = write_data(root)
        full: dict[bool, list[float]] = {True: [], False: []}
        caches: dict[bool, Path] = {}
        for i in range(a.repeat):
            for checked in (True, False) if i % 2 == 0 else (False, True):
                caches[checked] = root / f"{'on' if checked else 'off'}-{i}"
                full[checked].append(night(caches[checked], data, checked=checked))
        on, off = parts(caches[True]), parts(caches[False])
        if on != off:
            sys.exit(f"the two full nights wrote different parts: {sorted(set(on.items()) ^ set(off.items()))[:5]}")
        n = max(3, a.repeat)
        cached: dict[bool, list[float]] = {True: [], False: []}
        for i in range(2 * n):  # alternating: a load that drifts over the minute hits both
            checked = i % 2 == 0
            cached[checked].append(night(caches[True], data, checked=checked))
        if computed_last_night(caches[True]):
            sys.exit("a cached night computed shards: the figures would not be a no-op night's")
        size, sha, xxh = hash_rates(caches[True], list(on))
        memo_pass, full_pass, n_artifacts = check_passes(caches[True])
    f_on, f_off = statistics.median(full[True]), statistics.median(full[False])
    overhead = (f_on - f_off) / f_off
    print(f"parts: {len(on)} files, the same bytes with checks on and off")
    print(
        f"full night (tiny demo, median of {a.repeat}): on {f_on:.1f} s, off {f_off:.1f} s: "
        f"overhead {overhead:+.1%} (goal <= {GOAL:.0%})"
    )
    c_on, c_off = statistics.median(cached[True]), statistics.median(cached[False])
    print(
        f"cached no-op night (median of {n}, alternating): on {c_on:.2f} s, off {c_off:.2f} s: "
        f"{c_on / c_off:.2f}x, {c_on - c_off:+.2f} s"
    )
    print(
        f"in process, every artifact ({n_artifacts}) checked as a cached night does (stat keys and memo): "
        f"{memo_pass * 1e3:.1f} ms = {memo_pass / c_off:.2%} of the cached night; hashed whole as `augdag verify` "
        f"does: {full_pass * 1e3:.0f} ms"
    )
    rate = f"xxh3-128 {xxh:.4f} s" if xxh is not None else "xxhash not installed"
    print(
        f"hashing every part once in memory: {size / 1e6:.1f} MB, sha256 {sha:.4f} s ({size / sha / 1e9:.2f} GB/s) = "
        f"{sha / f_off:.3%} of the full night; {rate}"
    )
    return 0 if overhead <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
