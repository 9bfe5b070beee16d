"""The loaders' cost (issue 49): rows/s of ``to_torch`` and ``to_hf`` against reading the same parts with pyarrow.

A view's worth of synthetic bitext-like parts (``uid, src, tgt, source, line``; 8-30 words per side from a
5,000-word vocabulary, 100,000 rows per part as the default shard size, one row group each) is written at two sizes,
1x (``--rows`` / 10) and 10x (``--rows``, default 10M). Each reader runs in a fresh process over each size and
yields batches of ``--batch-size`` rows as Python values, as a trainer consumes them:

- **pyarrow** (the baseline): ``ParquetFile.iter_batches(batch_size)`` over the parts, each batch ``to_pydict()``;
  ``arrow-only`` is the same read without the conversion (what no loader can beat; printed for scale);
- **torch**: augdag/torch.py's ``torch_dataset`` in a ``DataLoader`` with 2 workers (``loader(num_workers=2)``),
  without and with a shuffle seed (the strings become ``str``, the integers a tensor);
- **hf**: augdag/hf.py's ``hf_dataset`` (its Arrow files written first, timed apart as ``build``), then
  ``Dataset.iter(batch_size)``.

Before timing, the loaders' rows on the 1x parts are checked equal to pyarrow's. Printed per reader: rows/s at 10x,
the ratio to the pyarrow baseline (goal >= 0.8x); the CPU time per row of the reading process and of it with its
workers (on a machine whose cores are busy with other work, the wall-clock rate measures the others too: a reader
whose main process spends less CPU per row than the baseline keeps up with it where 2 cores are free for the
workers); and peak RSS at 1x and at 10x (``VmHWM`` of the reading process; ``ru_maxrss`` of its largest worker,
which starts from the reader's RSS at the fork; for hf also the largest anonymous RSS sampled while it iterates:
its memory-mapped Arrow pages are file-backed and counted in RSS as they are touched). Never run in CI.

    .venv/bin/python bench/loaders.py                 # 10M rows (~3 GB of parts, minutes)
    .venv/bin/python bench/loaders.py --rows 1000000  # smaller
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

PART_ROWS = 100_000
VOCAB = 5_000
GOAL = 0.8
READERS = ("pyarrow", "arrow-only", "torch", "torch-shuffled", "hf")


def vocabulary(seed: int) -> pa.Array:
    """``VOCAB`` pseudo-words of 2-10 lowercase letters."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 11, VOCAB)
    letters = rng.integers(97, 123, lengths.sum()).astype(np.uint8).tobytes().decode()
    ends = np.cumsum(lengths)
    return pa.array([letters[e - n : e] for n, e in zip(lengths, ends)])


def sentences(rng: np.random.Generator, words: pa.Array, n: int) -> pa.Array:
    """``n`` sentences of 8-30 words of ``words``, joined in Arrow (no Python string per row)."""
    lengths = rng.integers(8, 31, n)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    tokens = words.take(pa.array(rng.integers(0, len(words), int(lengths.sum()))))
    return pc.binary_join(pa.ListArray.from_arrays(offsets, tokens), " ")


def build(root: Path, rows: int, *, seed: int = 0) -> list[Path]:
    """``rows`` bitext-like rows as parts of ``PART_ROWS`` rows under ``root`` (one part in memory at a time)."""
    root.mkdir(parents=True)
    words, paths = vocabulary(seed), []
    for i, start in enumerate(range(0, rows, PART_ROWS)):
        n = min(PART_ROWS, rows - start)
        rng = np.random.default_rng([seed, i])
        line = pa.array(np.arange(start + 1, start + n + 1, dtype=np.int64))
        table = pa.table(
            {
                "uid": pc.binary_join_element_wise("u", pc.cast(line, pa.string()), ""),
                "src": sentences(rng, words, n),
                "tgt": sentences(rng, words, n),
                "source": pa.array(["bench"] * n),
                "line": line,
            }
        )
        paths.append(root / f"part-{i:05d}.parquet")
        pq.write_table(table, paths[-1])
    return paths


def read(reader: str, paths: list[str], batch_size: int, cache_dir: str) -> dict[str, float]:
    """Every row of ``paths`` through ``reader``, in this process: rows, seconds and the peaks."""
    import torch  # noqa: F401  (imported before the clock starts, as a trainer has it already)

    from augdag.hf import hf_dataset
    from augdag.torch import torch_dataset

    peak_anon, build_s, rows = 0, 0.0, 0
    start, cpu = time.perf_counter(), cpu_s()
    if reader in ("pyarrow", "arrow-only"):
        for p in paths:
            for batch in pq.ParquetFile(p).iter_batches(batch_size=batch_size):
                rows += len(batch.to_pydict()["uid"]) if reader == "pyarrow" else batch.num_rows
    elif reader.startswith("torch"):
        seed = 0 if reader == "torch-shuffled" else None
        ds = torch_dataset(paths, batch_size=batch_size, shuffle_seed=seed)
        for batch in ds.loader(num_workers=2):
            rows += len(batch["uid"])
    else:
        ds = hf_dataset(paths, info={"run": "bench", "artifacts": [], "lineage_columns": ["uid"]}, cache_dir=cache_dir)
        build_s = time.perf_counter() - start
        start, cpu = time.perf_counter(), cpu_s()
        for i, batch in enumerate(ds.iter(batch_size=batch_size)):
            rows += len(batch["uid"])
            if i % 100 == 0:
                peak_anon = max(peak_anon, anon_rss())
    seconds, (main_cpu, worker_cpu) = time.perf_counter() - start, (a - b for a, b in zip(cpu_s(), cpu))
    return {
        "rows": rows,
        "seconds": seconds,
        "main_cpu_s": main_cpu,
        "worker_cpu_s": worker_cpu,
        "build_s": build_s,
        "rss_mb": peak_rss() / 1024,
        "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "anon_mb": peak_anon / 1024,
    }


def cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) so far of this process and of its ended children (the DataLoader's workers)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def status_kb(key: str) -> int:
    """A line of /proc/self/status in KiB: ``VmHWM`` (peak RSS), ``RssAnon`` (anonymous RSS now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def anon_rss() -> int:
    return status_kb("RssAnon")


def peak_rss() -> int:
    """This process's peak RSS in KiB: ``VmHWM``, not ``ru_maxrss`` (which Linux carries over fork and exec: a
    reader started by this script would report this script's peak)."""
    return status_kb("VmHWM")


def measured(reader: str, parts: list[Path], batch_size: int, cache_dir: Path) -> dict[str, float]:
    """``read`` in a fresh process (its peak RSS is the reader's own)."""
    args = [sys.executable, __file__, "--measure", reader, "--batch-size", str(batch_size), "--cache-dir", str(cache_dir)]
    out = subprocess.run([*args, *map(str, parts)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{reader} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_equal(parts: list[Path], batch_size: int, cache_dir: Path) -> None:
    """The loaders' rows on ``parts`` are pyarrow's: torch in order without a seed, as a set with one; hf in order."""
    import torch

    from augdag.hf import hf_dataset
    from augdag.torch import torch_dataset

    expected = pa.concat_tables(pq.read_table(p) for p in parts)
    plain = torch_dataset(parts, batch_size=batch_size)
    assert [u for b in plain for u in b["uid"]] == expected["uid"].to_pylist(), "torch_dataset: rows differ from pyarrow's"
    shuffled = torch_dataset(parts, batch_size=batch_size, shuffle_seed=0).loader(num_workers=2)
    lines = torch.cat([b["line"] for b in shuffled])
    assert sorted(lines.tolist()) == expected["line"].to_pylist(), "torch_dataset (shuffled): not every row once"
    ds = hf_dataset(parts, info={"run": "bench", "artifacts": [], "lineage_columns": []}, cache_dir=cache_dir)
    assert ds.data.table.equals(expected), "hf_dataset: rows differ from pyarrow's"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows of the 10x view (1x: a tenth)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--measure", choices=READERS, help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", help=argparse.SUPPRESS)
    ap.add_argument("parts", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(read(args.measure, args.parts, args.batch_size, args.cache_dir)))
        return
    from bench.common import workdir  # not in the measuring processes: its imports would count in their RSS

    with workdir("loaders") as root:
        t = time.perf_counter()
        sizes = {"1x": build(root / "1x", args.rows // 10), "10x": build(root / "10x", args.rows)}
        print(f"built {args.rows // 10:,} + {args.rows:,} rows in {time.perf_counter() - t:.0f} s", flush=True)
        check_equal(sizes["1x"], args.batch_size, root / "hf-check")
        got = {(r, s): measured(r, parts, args.batch_size, root / f"hf-{s}") for r in READERS for s, parts in sizes.items()}
    base = got["pyarrow", "10x"]["rows"] / got["pyarrow", "10x"]["seconds"]
    base_cpu = got["pyarrow", "10x"]["main_cpu_s"] / got["pyarrow", "10x"]["rows"]
    print(f"loaders over {args.rows:,} rows, batch {args.batch_size}; baseline pyarrow iter_batches + to_pydict")
    for r in READERS:
        small, large = got[r, "1x"], got[r, "10x"]
        rate = large["rows"] / large["seconds"]
        rss = f"peak RSS {small['rss_mb']:.0f} -> {large['rss_mb']:.0f} MB (1x -> 10x)"
        if r.startswith("torch"):
            rss += f", workers {small['worker_rss_mb']:.0f} -> {large['worker_rss_mb']:.0f} MB"
        if r == "hf":
            rss += f", anonymous {small['anon_mb']:.0f} -> {large['anon_mb']:.0f} MB; build {large['build_s']:.1f} s"
        goal = "" if r in ("pyarrow", "arrow-only") else f" (goal >= {GOAL}x)"
        main_us, all_us = (1e6 * t / large["rows"] for t in (large["main_cpu_s"], large["main_cpu_s"] + large["worker_cpu_s"]))
        cpu = (
            f"CPU {main_us:.2f} us/row in the reader ({base_cpu * 1e6 / main_us:.2f}x pyarrow's rate), {all_us:.2f} with workers"
        )
        print(f"  {r:15s} {rate:12,.0f} rows/s  {rate / base:5.2f}x pyarrow{goal}; {cpu}; {rss}", flush=True)


if __name__ == "__main__":
    main()
