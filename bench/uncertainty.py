"""Sentence uncertainty (Eq. 6.3) and sampling (Eq. 6.6–6.7) over N seeded demo monolingual sentences.

throughput: ``sentence_uncertainty`` (the stage function) over shards of 100k rows already in memory, against
    (a) the reference scripts' way on the same shards: the column as Python strings and a per-sentence loop over
        a dict (`sum(H.get(w, 0) ...) / len`); goal >= 20x;
    (b) a bare scan of the same Parquet text column: reading it and scoring it costs <= 3x reading it alone.
    Equality with (a) is checked first, on every row.
memory: scoring + sample keys + the global selection + taking the sample over ``--mem-rows`` sentences in a
    fresh subprocess, shard by shard as the flow runs them; peak RSS. Goal: <= 1.5 GB at 10M.

    .venv/bin/python bench/uncertainty.py --only throughput --rows 1000000
    .venv/bin/python bench/uncertainty.py --only memory --mem-rows 10000000

The lexicon is the demo grammar's true word entropy (demo.word_entropy), so ~10 % of the words
(the out-of-grammar ones) are unknown, as in real monolingual data. Exits 1 when a goal is missed.
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
import pyarrow.parquet as pq

from bench.common import timed, workdir
from demo import iter_mono, word_entropy
from storage.artifacts import write_part
from storage.parts import Parts
from storage.schemas import MONO, with_uid

SHARD = 100_000
LOOP_GOAL, SCAN_GOAL, MEMORY_GOAL_BYTES = 20.0, 3.0, 1.5e9


def write_shards(root: Path, n: int, *, seed: int = 0) -> list[Path]:
    """``n`` demo mono sentences as cleaned-artifact-like parts (uid, text, source, line) of 100k rows."""
    parts, lines = [], iter_mono(n, seed=seed)
    for k, start in enumerate(range(0, n, SHARD)):
        texts = [next(lines) for _ in range(min(SHARD, n - start))]
        table = pa.table(
            {
                "uid": pa.nulls(len(texts), pa.string()),
                "text": texts,
                "source": ["bench"] * len(texts),
                "line": pa.array(range(start + 1, start + len(texts) + 1), pa.int64()),
            },
            schema=MONO,
        )
        parts.append(root / f"part-{k:05d}.parquet")
        write_part(with_uid(table, "mono"), parts[-1])
    return parts


def lexicon_table() -> pa.Table:
    H = word_entropy()
    return pa.table({"src": list(H), "H": list(H.values()), "links": [1] * len(H), "freq": [1] * len(H)})


def loop_uncertainty(shards: list[pa.Table], H: dict[str, float]) -> np.ndarray:
    """The baseline: a per-sentence Python loop over a dict, as the reference scripts score sentences."""
    out = []
    for shard in shards:
        for s in shard["text"].to_pylist():
            words = s.split()
            out.append(sum(H.get(w, 0.0) for w in words) / len(words) if words else 0.0)
    return np.array(out)


def scan(parts: list[Path]) -> int:
    return sum(pq.read_table(part, columns=["text"]).num_rows for part in parts)


def ours(shards: list[pa.Table], lexicon: pa.Table) -> np.ndarray:
    from tasks.self_training.uncertainty import sentence_uncertainty

    return np.concatenate([sentence_uncertainty(s, lexicon, column="text")["uncertainty"].to_numpy() for s in shards])


def best(repeat: int, fn, *args) -> float:
    return min(timed(fn, *args)[1] for _ in range(repeat))


def throughput(rows: int, repeat: int) -> bool:
    with workdir("uncertainty") as root:
        parts, lexicon = write_shards(root, rows), lexicon_table()
        shards = [pq.read_table(p) for p in parts]
        H = dict(zip(lexicon["src"].to_pylist(), lexicon["H"].to_pylist()))
        expected, loop_s = timed(loop_uncertainty, shards, H)
        got = ours(shards, lexicon)
        assert np.allclose(got, expected, rtol=1e-12, atol=1e-15), "sentence_uncertainty differs from the loop"
        ours_s, scan_s = best(repeat, ours, shards, lexicon), best(repeat, scan, parts)
    vs_loop, vs_scan = loop_s / ours_s, (scan_s + ours_s) / scan_s
    print(
        f"uncertainty n={rows:,}: ours {rows / ours_s:,.0f} rows/s, loop {rows / loop_s:,.0f} rows/s, "
        f"scan {rows / scan_s:,.0f} rows/s"
    )
    print(
        f"uncertainty n={rows:,}: {vs_loop:.1f}x the per-sentence loop (goal >= {LOOP_GOAL:g}x); "
        f"read + score costs {vs_scan:.2f}x a bare scan of the text column (goal <= {SCAN_GOAL:g}x)"
    )
    return vs_loop >= LOOP_GOAL and vs_scan <= SCAN_GOAL


def memory_child(rows: int, budget: int) -> None:
    """Score, key, select and take over every shard, as the flow does; prints its peak RSS as JSON."""
    from tasks.self_training.uncertainty import sample_keys, select_sample, sentence_uncertainty, take_sample, u_max

    with workdir("uncertainty-mem") as root:
        t0 = time.perf_counter()
        parts, lexicon = write_shards(root, rows), lexicon_table()
        write_s, t0 = time.perf_counter() - t0, time.perf_counter()
        scored = []
        for k, part in enumerate(parts):
            scored.append(root / f"scored-{k:05d}.parquet")
            write_part(sentence_uncertainty(pq.read_table(part), lexicon, column="text"), scored[-1])
        umax = u_max(Parts(tuple(scored[: max(1, len(scored) // 10)])), percentile_r=90)  # stands in for the bitext's
        keys = []
        for k, s in enumerate(scored):
            keys.append(root / f"keys-{k:05d}.parquet")
            write_part(sample_keys(pq.read_table(s), u_max=umax, budget=budget), keys[-1])
        selected = select_sample(Parts(tuple(keys)), budget=budget)
        taken = sum(take_sample(pq.read_table(p), selected).num_rows for p in parts)
        seconds = time.perf_counter() - t0
    assert taken == budget
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak": peak, "seconds": seconds, "write_seconds": write_s}))


def memory(rows: int, budget_ratio: float) -> bool:
    budget = int(rows * budget_ratio)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(rows), str(budget)], check=True, capture_output=True, text=True
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"uncertainty memory n={rows:,} budget={budget:,}: peak RSS {out['peak'] / 1e9:.2f} GB "
        f"(goal <= {MEMORY_GOAL_BYTES / 1e9:g} GB); score + sample {out['seconds']:.1f} s "
        f"({rows / out['seconds']:,.0f} rows/s), writing the input {out['write_seconds']:.1f} s"
    )
    return out["peak"] <= MEMORY_GOAL_BYTES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["throughput", "memory"])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--mem-rows", type=int, default=10_000_000)
    ap.add_argument("--budget-ratio", type=float, default=0.2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        memory_child(*a.child)
        return
    ok = True
    if a.only in (None, "throughput"):
        ok &= throughput(a.rows, a.repeat)
    if a.only in (None, "memory"):
        ok &= memory(a.mem_rows, a.budget_ratio)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
