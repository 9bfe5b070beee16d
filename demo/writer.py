"""Writing the demo corpora: every file under one root, streamed chunk by chunk to `<name>.tmp` + rename.

The sizes default to the demo profile's (`conf.schema.DemoConf`), so `augdag demo` and a bare
`write_demo(root)` write the same bytes.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from conf.schema import DemoConf
from demo.bitext import bitext_chunks, iter_bitext
from demo.corruptions import bad_lines, corrupt
from demo.grammar import TABLE
from demo.labeled import labeled_chunks
from demo.mono import mono_chunks
from demo.noise import NOISE_REASONS, noise_lines, plant
from demo.slots import slots_chunks
from demo.slots_small import SMALL_SLOTS_ROWS, small_slots_chunks

_DEFAULT = DemoConf()


@dataclass(frozen=True)
class DemoPaths:
    """The demo files under `root`; `DemoPaths.at(root)` names them."""

    root: Path
    train_src: Path
    train_tgt: Path
    alignments: Path
    test_src: Path
    test_tgt: Path
    mono: Path
    labeled: Path
    slots: Path
    lexicon: Path  # TSV en, de, p of the true table; an empty de is the null translation
    labeled_test: Path  # held out: the classifier of train_classifier is evaluated on it
    slots_test: Path  # held out: the tagger of train_slot_tagger is evaluated on it
    slots_small: Path  # the ATIS-small-like set (demo/slots_small.py): c2c and the slot taggers train on it
    slots_small_test: Path  # held out: its taggers are evaluated on it

    @classmethod
    def at(cls, root: Path) -> DemoPaths:
        names = [
            "train.en",
            "train.de",
            "train.align",
            "test.en",
            "test.de",
            "mono.en",
            "labeled.tsv",
            "slots.jsonl",
            "lexicon.tsv",
            "labeled_test.tsv",
            "slots_test.jsonl",
            "slots_small.jsonl",
            "slots_small_test.jsonl",
        ]
        return cls(Path(root), *(Path(root) / name for name in names))


def _write(paths: list[Path], chunks, bad: dict[int, str]) -> None:
    """Stream chunks of line lists (one list per file) to `<name>.tmp`, planting `bad`, then rename."""
    tmps = [p.with_name(p.name + ".tmp") for p in paths]
    try:
        with ExitStack() as stack:
            files = [stack.enter_context(open(t, "wb")) for t in tmps]
            done = 0
            for chunk in chunks:
                cols = [chunk] if isinstance(chunk, list) else list(chunk)
                for line, reason in bad.items():
                    if done < line <= done + len(cols[0]):
                        i = line - done - 1
                        if len(cols) == 3:  # bitext: one side corrupted, no gold alignment
                            side = 0 if reason.endswith("_src") else 1
                            cols[side][i], cols[2][i] = corrupt(cols[side][i], reason), ""
                        else:
                            cols[0][i] = corrupt(cols[0][i], reason)
                done += len(cols[0])
                for f, lines in zip(files, cols):
                    f.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in zip(tmps, paths):
        os.replace(tmp, path)


def _noisy(chunks, noise: dict[int, str], test: list[tuple[str, str, str]]):
    """The bitext chunks with the pairs of ``noise`` ({1-based line: reason}) planted (demo/noise.py); the n-th
    test-overlap pair copies test pair 37·n mod |test|."""
    done, nth = 0, dict.fromkeys(NOISE_REASONS, 0)
    for chunk in chunks:
        cols = [list(c) for c in chunk]
        for line, reason in sorted(noise.items()):
            if done < line <= done + len(cols[0]):
                i, j = line - done - 1, nth[reason]
                cols[0][i], cols[1][i], cols[2][i] = plant(
                    cols[0][i], cols[1][i], cols[2][i], reason, nth=j, test=test[(37 * j) % len(test)]
                )
                nth[reason] += 1
        done += len(cols[0])
        yield tuple(cols)


def write_demo(
    root: Path,
    *,
    seed: int = _DEFAULT.seed,
    bitext_rows: int = _DEFAULT.bitext_rows,
    mono_rows: int = _DEFAULT.mono_rows,
    labeled_rows: int = _DEFAULT.labeled_rows,
    slots_rows: int = _DEFAULT.slots_rows,
    test_rows: int = _DEFAULT.test_rows,
    bad_rows: bool = True,
) -> tuple[DemoPaths, dict[str, dict[int, str]]]:
    """Write every demo corpus under `root`; the same arguments write the same bytes.

    A bad bitext pair corrupts one side and leaves its `train.align` line empty; the line count of the
    three bitext files stays equal. With ``bad_rows`` the training bitext also holds the valid noisy pairs
    of `demo.noise.noise_lines` (wrong language, numbers that disagree, copies of test pairs), which the
    read keeps and the demo profile's corpus filters drop. `test.*`, `labeled_test.tsv`, `slots_test.jsonl`,
    `slots_small_test.jsonl` (``test_rows`` rows each), `slots_small.jsonl` (``SMALL_SLOTS_ROWS`` rows, fewer when
    ``slots_rows`` is less) and `lexicon.tsv` are always clean. ``write_demo(root, **conf.demo.model_dump())``
    writes a profile's demo data.

    Args:
        root: The directory, created if missing.
        seed: The corpus seed (`DemoConf.seed`).
        bitext_rows: Training pairs (`DemoConf.bitext_rows`, as the other sizes).
        mono_rows: Mono lines.
        labeled_rows: Labelled rows.
        slots_rows: Slot-filling rows.
        test_rows: Held-out bitext pairs, labelled rows and slot rows each.
        bad_rows: Plant the bad lines of `demo.corruptions.bad_lines` in the training files, and the noisy pairs
            of `demo.noise.noise_lines` in the training bitext.

    Returns:
        The paths, and {file name: {1-based line: planted reason}} of the files with planted lines.
    """
    paths = DemoPaths.at(root)
    paths.root.mkdir(parents=True, exist_ok=True)
    rows = {"bitext": bitext_rows, "mono": mono_rows, "labeled": labeled_rows, "slots": slots_rows}
    planted = {kind: bad_lines(kind, n, seed=seed) if bad_rows else {} for kind, n in rows.items()}
    train = [paths.train_src, paths.train_tgt, paths.alignments]
    noise = noise_lines(bitext_rows, seed=seed, avoid=set(planted["bitext"])) if bad_rows and test_rows else {}
    test = list(iter_bitext(test_rows, seed=seed, split="test")) if noise else []
    _write(train, _noisy(bitext_chunks(bitext_rows, seed, "train"), noise, test), planted["bitext"])
    _write([paths.test_src, paths.test_tgt], (c[:2] for c in bitext_chunks(test_rows, seed, "test")), {})
    _write([paths.mono], mono_chunks(mono_rows, seed), planted["mono"])
    _write([paths.labeled], labeled_chunks(labeled_rows, seed), planted["labeled"])
    _write([paths.slots], slots_chunks(slots_rows, seed), planted["slots"])
    _write([paths.labeled_test], labeled_chunks(test_rows, seed, stream="labeled_test"), {})
    _write([paths.slots_test], slots_chunks(test_rows, seed, stream="slots_test"), {})
    _write([paths.slots_small], small_slots_chunks(min(SMALL_SLOTS_ROWS, slots_rows), seed), {})
    _write([paths.slots_small_test], small_slots_chunks(test_rows, seed, stream="slots_small_test"), {})
    lexicon = [f"{en}\t{de}\t{p:g}" for en, t in sorted(TABLE.items()) for de, p in sorted(t.items())]
    _write([paths.lexicon], iter([lexicon]), {})
    by_file = {p.name: planted["bitext"] for p in train}
    by_file |= {paths.mono.name: planted["mono"], paths.labeled.name: planted["labeled"]}
    by_file[paths.slots.name] = planted["slots"]
    return paths, by_file
