"""An arm's data as the files the trainers MT teams use read (`augdag export-arm --for ...`).

- ``opustrainer``: each mix entry's distinct rows once, raw ``src<TAB>tgt`` (storage/output.py ``tsv_table``: no
  quoting, a tab or line break in a value refused naming the row), and ``config.yml``, an OpusTrainer 0.5 curriculum:
  one dataset per (phase, entry), one stage per phase whose weights are the entry's share of the phase's rows
  (rows × copies / all, so one epoch of the stage reads what the student read), ``until`` the first entry's copies
  (one pass over the mix) for the train stage before a continued one, ``inf`` for the last stage (the trainer stops
  it), the profile's robustness modifiers (OpusTrainer's names, given by the caller), ``num_fields: 2``.
- ``marian`` / ``fairseq``: line-aligned ``<phase>.<src>`` and ``<phase>.<tgt>`` files (fairseq-preprocess
  ``--trainpref DIR/train --source-lang SRC --target-lang TGT``; Marian ``--train-sets``), every row as the
  student read it (copies repeated), a line break in a value refused.
- ``hf``: a ``datasets.DatasetDict`` (one split per phase) saved with ``save_to_disk``, and ``README.md``, its
  dataset card (storage/handoff/card.py).

Every format writes ``manifest.json``: the arm, the run, the artifacts, and the lines of each file it wrote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from conf.errors import CatalogError, ConfError
from storage.handoff import ArmData, Phase
from storage.output import replacing, tsv_table

FORMATS = ("opustrainer", "marian", "fairseq", "hf")
NAME = re.compile(r"[A-Za-z0-9_.-]+")


def check_directory(out: Path, *, force: bool, cache: Path) -> None:
    """``out`` may be written: absent or an empty directory (``force``: any directory), outside the cache."""
    root, real = Path(cache).resolve(), out.resolve()
    if real == root or root in real.parents:
        raise ConfError(f"{out}: is inside the cache {cache}; -o never writes into the cache. Hint: a directory outside it")
    if out.exists() and not out.is_dir():
        raise ConfError(f"{out}: is not a directory; -o names the directory the files go to")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfError(f"{out}: exists and is not empty. Hint: another directory, or --force to write over its files")


def weights(phase: Phase) -> dict[str, float]:
    """Each entry's share of the phase's rows, rows × copies / all (OpusTrainer reads int(batch × weight) lines of
    it per batch: a share is written whole, so that rounding takes no line off an exact multiple)."""
    entries = phase.entries()
    total = sum(e.mixed_rows for e in entries)
    return {e.name: e.mixed_rows / total for e in entries}


def dataset_name(phase: Phase, entry: str) -> str:
    """The OpusTrainer dataset of a phase's entry: the entry's name, ``continue_<name>`` in the continued phase."""
    if not NAME.fullmatch(entry):
        raise ConfError(
            f"mix entry {entry!r}: OpusTrainer names a dataset by one word of letters, digits, '_', '.', '-'. "
            "Hint: rename the entry in train_nmt's mix"
        )
    return entry if phase.name == "train" else f"continue_{entry}"


def opustrainer_config(arm: ArmData, modifiers: Sequence[Mapping[str, Any]], *, seed: int) -> dict[str, Any]:
    """The OpusTrainer 0.5 curriculum of ``arm`` (see the module docstring); ``modifiers``: OpusTrainer's list."""
    doc: dict[str, Any] = {"datasets": {}, "stages": [p.name for p in arm.phases]}
    for i, phase in enumerate(arm.phases):
        entries, shares = phase.entries(), weights(phase)
        mix = []
        for e in entries:
            name = dataset_name(phase, e.name)
            doc["datasets"][name] = f"{name}.tsv"
            mix.append(f"{name} {shares[e.name]}")
        first = entries[0]
        last = i == len(arm.phases) - 1
        mix.append(f"until {dataset_name(phase, first.name)} {'inf' if last else first.copies}")
        doc[phase.name] = {"mix": mix}
    doc["modifiers"] = [dict(m) for m in modifiers]
    doc["seed"] = seed
    doc["num_fields"] = 2
    return doc


def write_opustrainer(
    arm: ArmData, out: Path, modifiers: Sequence[Mapping[str, Any]], *, seed: int, cache: Path
) -> dict[str, int]:
    """The TSV files and ``config.yml`` (see the module docstring); returns {file: lines}."""
    texts: dict[str, str] = {}
    for phase in arm.phases:
        for e in phase.entries():
            try:
                texts[f"{dataset_name(phase, e.name)}.tsv"] = tsv_table(e.rows.select(["src", "tgt"]), header=False)
            except CatalogError as err:
                raise CatalogError(f"arm {arm.arm}, {phase.name} entry {e.name}: {err}") from None
    head = (
        f"# OpusTrainer 0.5 curriculum of train_nmt arm {arm.arm!r}, run {arm.run_id} (augdag export-arm). Weights: each\n"
        "# entry's rows x copies / the stage's rows; the last stage runs until the trainer stops.\n"
        "#   opustrainer-train --config config.yml marian -c marian.yml\n"
    )
    body = yaml.safe_dump(opustrainer_config(arm, modifiers, seed=seed), sort_keys=False, allow_unicode=True)
    texts["config.yml"] = head + body
    return write_texts(out, texts, cache=cache)


def line_text(table: pa.Table, column: str, where: str) -> str:
    """``column`` of ``table`` as lines; a value holding a line break is refused, naming the row."""
    values = pc.cast(table[column], pa.string())
    broken = pc.match_substring_regex(values, r"[\n\r]")
    if table.num_rows and pc.any(broken).as_py():
        i = pc.index(broken, True).as_py()
        raise CatalogError(
            f"{where}, row {i + 1}, {column}: holds a line break; a line-aligned file would lose its alignment. "
            "Hint: --for hf, or clean the pair in the mix's query"
        )
    return "".join(v + "\n" for v in values.to_pylist())


def write_parallel(arm: ArmData, out: Path, *, src: str, tgt: str, cache: Path) -> dict[str, int]:
    """``<phase>.<src>`` and ``<phase>.<tgt>``, line-aligned, every row as the student read it; {file: lines}."""
    if src == tgt:
        raise ConfError(f"--src-lang and --tgt-lang are both {src!r}: the two sides need two file names")
    texts = {}
    for phase in arm.phases:
        where = f"arm {arm.arm}, {phase.name}"
        texts[f"{phase.name}.{src}"] = line_text(phase.table, "src", where)
        texts[f"{phase.name}.{tgt}"] = line_text(phase.table, "tgt", where)
    return write_texts(out, texts, cache=cache)


def write_texts(out: Path, texts: Mapping[str, str], *, cache: Path) -> dict[str, int]:
    """Each text as ``out/<name>``, all replaced together (storage/output.py ``replacing``); {name: lines}."""
    names = list(texts)
    with replacing([out / n for n in names], force=True, cache=cache) as files:
        for f, n in zip(files, names):
            f.write(texts[n].encode("utf-8"))
    return {n: texts[n].count("\n") for n in names}


def write_hf(arm: ArmData, out: Path) -> dict[str, int]:
    """A ``datasets.DatasetDict`` of one split per phase (columns src, tgt, source, copy, uid, line), saved to
    ``out`` with ``save_to_disk``; {split: rows}."""
    import datasets  # here: it costs ~1 s of import

    splits = {
        p.name: datasets.Dataset(p.table.select(["src", "tgt", "source", "copy", "uid", "line"]).combine_chunks())
        for p in arm.phases
    }
    datasets.DatasetDict(splits).save_to_disk(str(out))
    return {name: d.num_rows for name, d in splits.items()}


def manifest(arm: ArmData, fmt: str, files: Mapping[str, int], **extra: Any) -> str:
    """``manifest.json``: what was exported, from which run and artifacts, and the lines (or rows) of each file."""
    doc = {
        "arm": arm.arm,
        "run_id": arm.run_id,
        "format": fmt,
        "phases": [
            {
                "phase": p.name,
                "training_mix": p.fingerprint,
                "rows": p.table.num_rows,
                "entries": {e.name: {"rows": e.rows.num_rows, "copies": e.copies} for e in p.entries()},
            }
            for p in arm.phases
        ],
        "files": dict(files),
        **extra,
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
