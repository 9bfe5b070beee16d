"""The Moses tokeniser as a mapped stage on worker processes vs a single-process sacremoses loop (issue 18).

Both tokenise the same N raw monolingual sentences (the demo grammar's, capitalised, with commas, full
stops and question marks attached, as in tests/pipelines/self_training/test_tokenize.py): the baseline is one process looping
``MosesTokenizer.tokenize`` over every line; augdag runs the `tokenize` stage over the ingested shards of
100k rows through a Prefect flow on ``task_runner.kind: processes`` with ``--workers`` workers, and the
time is the stage's wall time as the flow run records it: Prefect's task submission, each shard's Parquet
read and write included; the worker processes were started by the ingest stages before it, as in a
pipeline run (starting them costs ~2 s each, once per run). The outputs
are compared on every row first. Goal: >= 1.8x with 2 workers.

    .venv/bin/python bench/tokenizer.py --rows 1000000 --workers 2

(Not `bench/tokenize.py`: run as a script, a file of that name shadows the standard library's `tokenize`
for every script in bench/.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow as pa

from bench.common import prefect_server, workdir
from conf.schema import AugdagConf, DatasetConf, TaskRunnerConf
from demo import iter_mono
from storage.parts import Parts

GOAL = 1.8


def raw_sentence(line: str, i: int) -> str:
    words = line.split()
    words[0] = words[0].capitalize()
    if i % 3 == 0 and len(words) > 2:
        words[1] += ","
    words[-1] += "?" if i % 4 == 0 else "."
    return " ".join(words)


def write_raw(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, line in enumerate(iter_mono(n, seed=0)):
            f.write(raw_sentence(line, i) + "\n")


def loop(lines: list[str]) -> list[str]:
    """The baseline: sacremoses in one process, line by line."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang="en")
    return [tok.tokenize(t, escape=False, return_str=True) for t in lines]


def mapped(conf: AugdagConf) -> tuple[pa.Table, float]:
    """ingest, then the `tokenize` stage on the profile's task runner; (its rows in input order, its seconds)."""
    from prefect import flow

    from flows.engine.driver import Run
    from flows.engine.runners import run_flow
    from flows.pipelines.ingest import ingest_dataset
    from flows.pipelines.self_training import tokenized

    @flow(name="bench_tokenize")
    def tokenize_flow(conf: AugdagConf) -> dict:
        with Run.started(conf, pipeline="bench_tokenize", profile="bench", config=None) as run:
            mono = ingest_dataset(run, conf, "bench")
            tokenized(run, mono, conf.self_training.tokenizer, {"text": "src"})
        return run.finish()

    summary = run_flow(tokenize_flow, conf)  # ingest first: the worker processes are started
    stage = next(s for s in summary["stages"] if s["stage"] == "tokenize")
    out = Parts(tuple(sorted((conf.cache / "artifacts" / "tokenize" / stage["fingerprint"]).glob("part-*.parquet"))))
    return out.table(["line", "text"]).sort_by("line"), stage["seconds"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with workdir("tokenize") as root, prefect_server(root):
        write_raw(root / "mono.en", args.rows)
        lines = (root / "mono.en").read_text(encoding="utf-8").splitlines()
        t0 = time.perf_counter()
        expected = loop(lines)
        base = time.perf_counter() - t0
        conf = AugdagConf(
            cache=root / "cache",
            shard_size=100_000,
            datasets={"bench": DatasetConf(kind="mono", format="text", path=root / "mono.en")},
            task_runner=TaskRunnerConf(kind="processes", max_workers=args.workers),
            ingest={"clean": {"dedup": False}},
            self_training={"tokenizer": {"kind": "moses", "src_lang": "en", "tgt_lang": "de"}},
        )
        rows, ours = mapped(conf)
        got = dict(zip(rows["line"].to_pylist(), rows["text"].to_pylist()))
        wrong = [i for i, t in enumerate(expected, 1) if got.get(i) != t]
        if wrong:
            print(f"FAIL: {len(wrong)} lines differ from the loop's tokens, first line {wrong[0]}")
            return 1
        ratio = base / ours
        print(
            f"{args.rows:,} lines: single-process sacremoses {base:.1f} s ({args.rows / base:,.0f} lines/s); "
            f"tokenize stage on {args.workers} worker processes {ours:.1f} s ({args.rows / ours:,.0f} lines/s); "
            f"ratio {ratio:.2f}x (goal >= {GOAL}x)"
        )
        return 0 if ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
