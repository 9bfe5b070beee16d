"""Peak memory of the lexicon and force_align as one reduce (before issue 51) vs mapped per part + a summing reduce.

The data: thesis-like pairs made as bench/thesis_scale.py makes them (k demo pairs joined into one line, k
log-normal, ~25 tokens a side), with the demo grammar's gold links shifted into each joined line, written as
the bitext's parts and the `align` artifact's parts (its columns, ``shard`` rows a part) and once more as one
alignment part (`align` today). Each step, and each part of a mapped step, runs in a fresh process and reports
its peak RSS (VmHWM): the one-process lexicon of before issue 51 (the bitext's parts against the whole
alignment's links), the mapped `link_counts` (the largest task's peak) and the `lexicon` reduce over the counts'
parts; then `align` fitted on the first part, and force alignment of every pair at once (before) vs per part.
The lexicons, and the force-aligned rows, are compared (equal, or exit 1) before any figure is printed. The
demo grammar has a small vocabulary (its lexicon is a few hundred rows whatever the size): the reduce's figure
is the floor of a real corpus', whose lexical table is larger (≈ 1 GB at 50M pairs, docs/scale.md).

    .venv/bin/python bench/lexicon_scale.py                       # 1M pairs, parts of 100k
    .venv/bin/python bench/lexicon_scale.py --pairs 200000 --shard 20000 --no-force-align
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import workdir
from bench.thesis_scale import joins
from conf.errors import InputError
from demo import iter_bitext
from models.lexicon import build_lexicon, link_counts, linked_words, tokenize
from storage.parts import Parts
from storage.schemas import BITEXT, with_uid
from tasks.self_training.alignment import ALIGNMENT


def write_data(root: Path, n: int, shard: int) -> None:
    """``n`` joined pairs: bitext parts, alignment parts (``shard`` rows each) and the alignment as one part."""
    pieces, start = iter_bitext(int(joins(n, 1).sum()), seed=1), 0
    (root / "bitext").mkdir()
    (root / "align").mkdir()
    writer = None
    for part, ks in enumerate(np.array_split(joins(n, 1), range(shard, n, shard))):
        src, tgt, i_pos, j_pos = [], [], [], []
        for k in ks:
            s_words, t_words, ii, jj = [], [], [], []
            for s, t, a in (next(pieces) for _ in range(k)):
                for link in a.split():
                    i, j = link.split("-")
                    ii.append(int(i) + len(s_words))
                    jj.append(int(j) + len(t_words))
                s_words += s.split()
                t_words += t.split()
            src.append(" ".join(s_words))
            tgt.append(" ".join(t_words))
            i_pos.append(ii)
            j_pos.append(jj)
        m = len(ks)
        rows = with_uid(
            pa.table(
                {
                    "uid": pa.nulls(m, pa.string()),
                    "src": src,
                    "tgt": tgt,
                    "source": ["bench"] * m,
                    "line": pa.array(range(start + 1, start + m + 1), pa.int64()),
                },
                schema=BITEXT,
            ),
            "bitext",
        )
        src_len = [len(s.split()) for s in src]
        aligned = [len(set(ii)) for ii in i_pos]
        links = pa.table(
            {
                "uid": rows["uid"],
                "source": rows["source"],
                "line": rows["line"],
                "links": [" ".join(f"{i}-{j}" for i, j in zip(ii, jj)) for ii, jj in zip(i_pos, j_pos)],
                "src_pos": i_pos,
                "tgt_pos": j_pos,
                "src_tokens": src_len,
                "tgt_tokens": [len(t.split()) for t in tgt],
                "aligned_src": aligned,
                "coverage": [a / s if s else 0.0 for a, s in zip(aligned, src_len)],
            },
            schema=ALIGNMENT,
        )
        pq.write_table(rows, root / "bitext" / f"part-{part:05d}.parquet")
        pq.write_table(links, root / "align" / f"part-{part:05d}.parquet")
        writer = writer or pq.ParquetWriter(root / "alignment-one-part.parquet", ALIGNMENT)
        writer.write_table(links)
        start += m
    writer.close()


def one_process_lexicon(bitext_parts: Parts, alignment_parts: Parts, *, lowercase: bool = False) -> pa.Table:
    """`lexicon` as it was before issue 51 (tasks/self_training/alignment.py at 529da53): a reduce that holds every
    pair's links and the counts of every part."""
    links = alignment_parts.table(["uid", "src_pos", "tgt_pos"])
    uids, src_pos, tgt_pos = (links[c].combine_chunks() for c in ("uid", "src_pos", "tgt_pos"))
    counts, start = [], 0
    for rows in bitext_parts.tables(["uid", "src", "tgt"]):
        n = rows.num_rows
        if not rows["uid"].combine_chunks().equals(uids.slice(start, n)):
            raise InputError("lexicon: the alignment's rows are not the bitext's rows, in order (a stale artifact?)")
        sp, tp = src_pos.slice(start, n), tgt_pos.slice(start, n)
        offsets = np.asarray(sp.offsets, dtype=np.int64)
        counts.append(
            link_counts(
                linked_words(
                    tokenize(rows["src"], lowercase=lowercase),
                    tokenize(rows["tgt"], lowercase=lowercase),
                    offsets - offsets[0],
                    sp.flatten().to_numpy(),
                    tp.flatten().to_numpy(),
                )
            )
        )
        start += n
    return build_lexicon(pa.concat_tables(counts), counted=True)


def high_water() -> int:
    """This process' peak resident set (VmHWM, bytes): unlike ``ru_maxrss``, it does not carry the parent's peak
    over an exec."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def child(step: str, root: Path, part: int) -> None:
    """One step in this process (``part``: the part of a mapped step); prints {"seconds", "peak", "imported"}
    (bytes of RSS)."""
    from tasks.self_training.lexicon import lexicon, link_counts_of

    imported = high_water()
    t0 = time.perf_counter()
    bitext = sorted((root / "bitext").glob("part-*.parquet"))
    if step == "old":
        table = one_process_lexicon(Parts(tuple(bitext)), Parts((root / "alignment-one-part.parquet",)))
        pq.write_table(table, root / "old.parquet")
    elif step == "map":  # one task: bitext part i + alignment part i, read whole as the driver reads them
        (root / "counts").mkdir(exist_ok=True)
        b = bitext[part]
        pq.write_table(link_counts_of(pq.read_table(b), pq.read_table(root / "align" / b.name)), root / "counts" / b.name)
    elif step == "reduce":
        table = lexicon(Parts(tuple(sorted((root / "counts").glob("part-*.parquet")))))
        pq.write_table(table, root / "new.parquet")
    else:
        force_align_step(step, root, bitext, part)
    peak = high_water()
    print(json.dumps({"seconds": time.perf_counter() - t0, "peak": peak, "imported": imported}))


def force_align_step(step: str, root: Path, bitext: list[Path], part: int) -> None:
    """``fit``: `align` over the first part, its roles written as the artifact writes them; ``fa_old``: every pair
    force-aligned at once (the reduce before issue 51: the pairs' parts read as one table); ``fa_map``: one task,
    part ``part``, its aligner read from the side roles (as each task reads them)."""
    from tasks.self_training.alignment import align_bitext
    from tasks.self_training.lexicon import force_align

    model = root / "model"
    if step == "fit":
        model.mkdir(exist_ok=True)
        for role, table in align_bitext(Parts((bitext[0],))).items():
            pq.write_table(table, model / f"{role}-00000.parquet")
    elif step == "fa_old":
        pairs = Parts(tuple(bitext)).table(["uid", "source", "line", "src", "tgt"])
        pq.write_table(force_align(pairs, alignment=Parts((model / "part-00000.parquet",))), root / "fa_old.parquet")
    else:
        (root / "aligned").mkdir(exist_ok=True)
        aligned = force_align(pq.read_table(bitext[part]), alignment=Parts((model / "part-00000.parquet",)))
        pq.write_table(aligned, root / "aligned" / bitext[part].name)


def step(root: Path, name: str, parts: int) -> dict[str, float]:
    """A step in a fresh process per part: the largest peak (with its process' peak after the imports), the
    seconds added up."""
    run = [sys.executable, "-m", "bench.lexicon_scale", "--root", str(root), "--child", name, "--part"]
    each = [json.loads(subprocess.run([*run, str(i)], check=True, capture_output=True, text=True).stdout) for i in range(parts)]
    top = max(each, key=lambda r: r["peak"])
    return {"seconds": sum(r["seconds"] for r in each), "peak": top["peak"], "imported": top["imported"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--shard", type=int, default=100_000)
    parser.add_argument("--no-force-align", action="store_true", help="the lexicon only")
    parser.add_argument("--child", choices=["old", "map", "reduce", "fit", "fa_old", "fa_map"])
    parser.add_argument("--part", type=int, default=0)
    parser.add_argument("--root", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.root, args.part)
        return 0
    n_parts = -(-args.pairs // args.shard)
    with workdir("lexicon") as root:
        t0 = time.perf_counter()
        write_data(root, args.pairs, args.shard)
        print(f"data: {args.pairs:,} pairs in parts of {args.shard:,}, written in {time.perf_counter() - t0:.0f} s", flush=True)
        steps = ["old", "map", "reduce"] + ([] if args.no_force_align else ["fit", "fa_old", "fa_map"])
        out = {s: step(root, s, n_parts if s in ("map", "fa_map") else 1) for s in steps}
        old, new = pq.read_table(root / "old.parquet"), pq.read_table(root / "new.parquet")
        if not old.equals(new):
            print("the mapped lexicon differs from the one-process lexicon", file=sys.stderr)
            return 1
        if not args.no_force_align:
            parts = pa.concat_tables(pq.read_table(p) for p in sorted((root / "aligned").glob("part-*.parquet")))
            if not parts.equals(pq.read_table(root / "fa_old.parquet")):
                print("force_align per part differs from every pair force-aligned at once", file=sys.stderr)
                return 1
    gb = {s: r["peak"] / 1e9 for s, r in out.items()}
    above = {s: (r["peak"] - r["imported"]) / 1e9 for s, r in out.items()}  # what the step itself added
    print(
        f"lexicon n={args.pairs:,} pairs ({n_parts} parts, {old.num_rows:,} lexicon rows, identical): "
        f"one process {gb['old']:.2f} GB peak in {out['old']['seconds']:.1f} s; "
        f"link_counts {gb['map']:.2f} GB (the largest task's peak, a process per part) in {out['map']['seconds']:.1f} s; "
        f"lexicon reduce {gb['reduce']:.2f} GB in {out['reduce']['seconds']:.1f} s; above the imports "
        f"({out['map']['imported'] / 1e9:.2f} GB): {above['old']:.2f} vs {above['map']:.2f} and {above['reduce']:.2f} GB"
    )
    if not args.no_force_align:
        print(
            f"force_align n={args.pairs:,} pairs (identical rows): at once {gb['fa_old']:.2f} GB peak in "
            f"{out['fa_old']['seconds']:.1f} s; per part {gb['fa_map']:.2f} GB (the largest task's peak) in "
            f"{out['fa_map']['seconds']:.1f} s; above the imports {above['fa_old']:.2f} vs {above['fa_map']:.2f} GB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
