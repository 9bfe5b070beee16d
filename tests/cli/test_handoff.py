"""Issue 49, hand-offs to the trainers: `augdag export-arm ARM -o DIR --for opustrainer|marian|fairseq|hf` as a user
runs it (a subprocess), on a tiny cache whose `training_mix` artifacts are built by train_nmt's own ``arm_mix`` and
registered by hand for two runs (the pipeline itself, which trains students, runs in tests/e2e/test_handoff_cli.py).

Arm ``ct`` of run ``train_nmt-1``: entry ``a`` (4 pairs, 3 copies) + ``b`` (2 pairs) = 14 rows, continued on ``a``
(4 rows); of run ``train_nmt-2``: ``a`` has 5 pairs (17 rows, continue 5). Arm ``base`` (run 1 only): ``all``, 4 rows.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from conf.errors import CatalogError, ConfError
from storage.artifacts import ArtifactRef, fingerprint, write_manifest, write_part
from storage.catalog import Catalog
from storage.handoff import read_arm
from storage.handoff.formats import check_directory
from storage.schemas import REJECTS
from tasks.common.mix import content_hash
from tasks.train_nmt.experiments import arm_mix
from tests.conftest import bitext, catalog_rows, subprocess_env

A1 = [
    ("a man sits .", "ein mann sitzt ."),
    ('he said "hi" .', 'er sagte "hallo" .'),
    ("a dog", "ein hund"),
    ("we go", "wir gehen"),
]
A2 = [*A1, ("the end", "das ende")]
B = [("the cat 'runs'", "die katze 'rennt'"), ("two", "zwei")]
MIX = {"a": "SELECT src, tgt FROM bitext WHERE source = 'd'", "b": "SELECT src, tgt FROM bitext WHERE line > 2"}
CONFIG = {
    "datasets": {"d": {"kind": "bitext", "src_lang": "en", "tgt_lang": "de"}},
    "robustness": {"seed": 7, "modifiers": [{"UpperCase": 1.0}, {"Tags": 0.5}]},
}


def _pairs(pairs: list[tuple[str, str]]) -> pa.Table:
    return pa.table({"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]})


def _register(catalog: Catalog, ref: ArtifactRef, run: str, *, params: dict, parents: tuple[str, ...] = ()) -> None:
    now = datetime.now(UTC).isoformat()
    stage_runs = [{"run_id": run, "stage": ref.stage, "dataset": ref.dataset, "fingerprint": ref.fingerprint, "shard": 0}]
    manifest = write_manifest(ref, version="1", params=params)
    catalog.register(ref, manifest, run_id=run, parents=parents, stage_runs=[{**r, "started_at": now} for r in stage_runs])


def _mix(catalog: Catalog, run: str, arm: str, phase: str, selected: dict, copies: dict) -> None:
    table = arm_mix({k: _pairs(v) for k, v in selected.items()}, copies, arm=arm, phase=phase)
    params = {"arm": arm, "phase": phase, "mix": {k: MIX.get(k, MIX["a"]) for k in selected}, "copies": copies}
    dataset = f"train_nmt.{arm}" + (".continue" if phase == "continue" else "")
    ref = ArtifactRef(str(catalog.root), "training_mix", fingerprint("training_mix", "2", params, [content_hash(table)]))
    ref = ArtifactRef(ref.root, ref.stage, ref.fingerprint, "training_mix", dataset, 1)
    write_part(table, ref.path(0))
    _register(catalog, ref, run, params=params)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The cache of the module docstring, with an ingest run: `read` (2 rejects) → `clean` (3 dropped) → `bitext`."""
    cache = tmp_path_factory.mktemp("handoff") / "cache"
    catalog = Catalog(cache)
    catalog.start_run("ingest-1", pipeline="ingest", profile="p.yaml", config=CONFIG, flow_run_id=None)
    read = ArtifactRef(str(cache), "read", "1" * 32, None, "d", 1)
    write_part(bitext(A2), read.path(0))
    rejects = [["d", "d.en", 7, "empty", "an empty line", ""], ["d", "d.en", 9, "nul_byte", "a NUL byte", "x"]]
    write_part(pa.Table.from_pylist([dict(zip(REJECTS.names, r)) for r in rejects], REJECTS), read.path(0, "rejects"))
    _register(catalog, read, "ingest-1", params={})
    clean = ArtifactRef(str(cache), "clean", "2" * 32, "bitext", "d", 1)
    write_part(bitext(A2), clean.path(0))
    dropped = bitext([("x", "y z w"), ("p", "q r s"), ("bonjour", "hallo")], first_line=20)
    dropped = dropped.append_column("reason", pa.array(["length_ratio", "length_ratio", "language_id"]))
    write_part(dropped, clean.path(0, "dropped"))
    _register(catalog, clean, "ingest-1", params={}, parents=(read.fingerprint,))
    catalog.finish_run("ingest-1", status="completed", summary={})
    for run, a in (("train_nmt-1", A1), ("train_nmt-2", A2)):
        catalog.start_run(run, pipeline="train_nmt", profile="p.yaml", config=CONFIG, flow_run_id=None)
        _mix(catalog, run, "ct", "train", {"a": a, "b": B}, {"a": 3})
        _mix(catalog, run, "ct", "continue", {"a": a}, {})
        if run == "train_nmt-1":
            _mix(catalog, run, "base", "train", {"all": A1}, {})
        catalog.finish_run(run, status="completed", summary={})
    return cache


def augdag(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=cwd, env=subprocess_env(cwd), capture_output=True, text=True, timeout=120
    )


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("trainer", ["marian", "fairseq"])
def test_export_arm_writes_line_aligned_files_as_the_student_read_them_issue_49(cache, tmp_path, trainer):
    """The latest run's arm: train.en/train.de hold a's 5 pairs 3 times and b's 2 (17 lines each, raw: the quotes
    are the pairs' own), continue.* a's 5; manifest.json counts them and names the run."""
    r = augdag(tmp_path, "export-arm", "ct", "-o", str(tmp_path / "out"), "--for", trainer, "--cache", str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "out"
    src, tgt = lines_of(out / "train.en"), lines_of(out / "train.de")
    a, b = sorted(A2), sorted(B)  # the mix's order: by entry, copy, uid (tasks/common/mix.py)
    assert (len(src), len(tgt)) == (17, 17)
    assert sorted(zip(src, tgt)) == sorted(a * 3 + b)
    assert 'he said "hi" .' in src and 'er sagte "hallo" .' in tgt and "the cat 'runs'" in src
    assert sorted(zip(lines_of(out / "continue.en"), lines_of(out / "continue.de"))) == a
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["run_id"], manifest["format"], manifest["languages"]) == ("train_nmt-2", trainer, {"src": "en", "tgt": "de"})
    assert manifest["files"] == {"train.en": 17, "train.de": 17, "continue.en": 5, "continue.de": 5}
    assert [p["entries"] for p in manifest["phases"]] == [
        {"a": {"rows": 5, "copies": 3}, "b": {"rows": 2, "copies": 1}},
        {"a": {"rows": 5, "copies": 1}},
    ]
    assert "arm ct of run train_nmt-2 (train 17 rows, continue 5 rows) for " + trainer in r.stdout


def test_export_arm_run_pins_the_older_run_issue_49(cache, tmp_path):
    """--run train_nmt-1: its 4 pairs of a, 3 times, and b's 2 (14 lines); continued on its 4."""
    out = tmp_path / "p"
    pinned = augdag(
        tmp_path, "export-arm", "ct", "-o", str(out), "--for", "marian", "--run", "train_nmt-1", "--cache", str(cache)
    )
    assert pinned.returncode == 0, pinned.stderr
    assert sorted(zip(lines_of(out / "train.en"), lines_of(out / "train.de"))) == sorted(A1 * 3 + B)
    assert sorted(zip(lines_of(out / "continue.en"), lines_of(out / "continue.de"))) == sorted(A1)


def test_export_arm_of_an_unknown_arm_is_one_line_exit_2_and_writes_nothing_issue_49(cache, tmp_path):
    unknown = augdag(tmp_path, "export-arm", "nope", "-o", str(tmp_path / "u"), "--for", "hf", "--cache", str(cache))
    assert (unknown.returncode, unknown.stderr.strip()) == (2, "error: unknown arm 'nope'; the arms are: base, ct")
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize(
    "arm, run, profile_arms, error, message",
    [
        ("ct", "x-1", None, CatalogError, "--run x-1: no such run in the catalog (augdag runs lists them)"),
        (
            "base",
            "train_nmt-2",
            None,
            CatalogError,
            "--run train_nmt-2: that run did not build arm 'base'; the runs that did: train_nmt-1",
        ),
        (
            "fresh",
            None,
            ["ct", "fresh"],
            CatalogError,
            "arm 'fresh' has never been built: the catalog has no training_mix of it",
        ),
        ("nope", None, ["ct", "fresh"], CatalogError, "unknown arm 'nope'; the arms are: base, ct, fresh"),
    ],
)
def test_read_arm_names_what_is_missing_issue_49(cache, arm, run, profile_arms, error, message):
    with pytest.raises(error) as e:
        read_arm(Catalog(cache), arm, run, profile_arms)
    assert str(e.value).startswith(message)


def test_export_arm_for_opustrainer_writes_its_curriculum_and_opustrainer_reads_the_first_batch_issue_49(cache, tmp_path):
    """One TSV per (phase, entry), raw; weights rows × copies / rows (15/17, 2/17); the profile's UpperCase kept
    and its Tags left out with a line; OpusTrainer 0.5 loads the curriculum and makes its first batch of 17 (no
    shuffling): int(17 × w) lines of each dataset, in order, every one upper-cased."""
    out = tmp_path / "ot"
    r = augdag(tmp_path, "export-arm", "ct", "-o", str(out), "--for", "opustrainer", "--cache", str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: robustness.modifiers[1] Tags: left out: OpusTrainer's Tags reads a word alignment" in " ".join(
        r.stderr.split()
    )
    import yaml

    assert yaml.safe_load((out / "config.yml").read_text()) == {
        "datasets": {"a": "a.tsv", "b": "b.tsv", "continue_a": "continue_a.tsv"},
        "stages": ["train", "continue"],
        "train": {"mix": [f"a {15 / 17}", f"b {2 / 17}", "until a 3"]},
        "continue": {"mix": ["continue_a 1.0", "until continue_a inf"]},
        "modifiers": [{"UpperCase": 1.0}],
        "seed": 7,
        "num_fields": 2,
    }
    a = lines_of(out / "a.tsv")
    assert sorted(a) == sorted(f"{s}\t{t}" for s, t in A2) and lines_of(out / "b.tsv") == [f"{s}\t{t}" for s, t in sorted(B)]
    na, nb = int(17 * (15 / 17)), int(17 * (2 / 17))  # OpusTrainer: int(batch × weight) lines of each dataset
    first = (a * 3)[:na] + lines_of(out / "b.tsv")[:nb]
    assert (na, nb) == (15, 2) and opustrainer_first_batch(out / "config.yml", 17) == [line.upper() for line in first]


def opustrainer_first_batch(config: Path, batch_size: int) -> list[str]:
    """The first batch OpusTrainer 0.5's trainer (its Python API) makes from ``config``, unshuffled, its modifiers
    applied in this process (it seeds the global ``random``: its state is put back after); skipped without it."""
    if importlib.util.find_spec("opustrainer") is None:
        pytest.skip(
            "OpusTrainer 0.5 is not installed (bench/modifiers.py: uv pip install --no-deps opustrainer==0.5 typo==0.1.5)"
        )
    from opustrainer.trainer import CurriculumLoader, DatasetReader, Trainer

    state = random.getstate()
    try:
        with open(config, encoding="utf-8") as f:
            curriculum = CurriculumLoader().load(f, basepath=str(config.parent))
        trainer = Trainer(curriculum, reader=DatasetReader, shuffle=False)
        try:
            return "".join(next(trainer.run(batch_size=batch_size, processes=0))).splitlines()
        finally:
            trainer.close()
    finally:
        random.setstate(state)


def test_export_arm_for_hf_is_a_dataset_with_its_card_issue_49(cache, tmp_path):
    """`datasets.load_from_disk` reads one split per phase; the card names the run, the mix, the artifacts that
    served `bitext` and the drops and rejects of their lineage, by reason."""
    out = tmp_path / "hf"
    r = augdag(tmp_path, "export-arm", "ct", "-o", str(out), "--for", "hf", "--run", "train_nmt-1", "--cache", str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    import datasets

    d = datasets.load_from_disk(str(out))
    assert {k: v.num_rows for k, v in d.items()} == {"train": 14, "continue": 4}
    assert sorted(zip(d["continue"]["src"], d["continue"]["tgt"])) == sorted(A1)
    card = (out / "README.md").read_text()
    assert "from run `train_nmt-1` (pipeline train_nmt, profile `p.yaml`, completed" in card
    assert "| train | a | `SELECT src, tgt FROM bitext WHERE source = 'd'` | 3 | 4 | 12 |" in card
    assert f"| bitext | clean | d | {'2' * 32} | ingest-1 |" in card and f"|  | read | d | {'1' * 32} | ingest-1 |" in card
    drops = card[card.index("## Filters") :].splitlines()[4:]
    assert drops == [
        "| clean | d | language_id | 1 |",
        "| clean | d | length_ratio | 2 |",
        "| read | d | rejected: empty | 1 |",
        "| read | d | rejected: nul_byte | 1 |",
    ]


def test_export_arm_refuses_a_directory_that_is_not_empty_or_inside_the_cache_issue_49(cache, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine\n")
    full = augdag(tmp_path, "export-arm", "ct", "-o", str(tmp_path / "full"), "--for", "marian", "--cache", str(cache))
    assert (full.returncode, full.stderr.strip()) == (
        2,
        f"error: {tmp_path / 'full'}: exists and is not empty. Hint: another directory, or --force to write over its files",
    )
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["x"]
    with pytest.raises(ConfError, match="is inside the cache"):
        check_directory(cache / "x", force=True, cache=cache)


def test_export_arm_of_a_part_that_differs_from_its_manifest_is_one_line_and_writes_nothing_issue_49(cache, tmp_path):
    """A flipped byte in the latest `training_mix` part of arm ct: storage/integrity/'s one line (artifact, part,
    both hashes, the repair command), exit 1, no directory."""
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    (part,) = catalog_rows(copy, "SELECT path FROM artifacts WHERE dataset = 'train_nmt.ct' AND created_run = 'train_nmt-2'")
    path = copy / part["path"] / "part-00000.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    r = augdag(tmp_path, "export-arm", "ct", "-o", str(tmp_path / "o"), "--for", "marian", "--cache", str(copy))
    assert r.returncode == 1, r.stdout + r.stderr
    line = " ".join(r.stderr.split())
    assert line.startswith(
        f"error: artifact training_mix/{Path(part['path']).name}: part-00000.parquet differs from its manifest"
    )
    assert line.endswith(f"Hint: augdag verify --repair --cache {copy}") and not (tmp_path / "o").exists()


def test_export_arm_takes_the_modifiers_of_the_profile_config_names_issue_49(cache, tmp_path):
    """--config: that profile's robustness list (an alias written as OpusTrainer names it) and seed; an arm the
    profile names that no run built is one line, exit 2."""
    (tmp_path / "p.yaml").write_text(
        "pipelines: [ingest, train_nmt]\n"
        "datasets: {d: {kind: bitext, format: text, src: x.en, tgt: x.de}}\n"
        "robustness: {seed: 11, modifiers: [{TitleCase: 0.2}, {RemoveEndPunctuation: 0.1}]}\n"
        "train_nmt:\n  experiments:\n    ct: {mix: {a: 'SELECT src, tgt FROM bitext'}}\n"
        "    fresh: {mix: {a: 'SELECT src, tgt FROM bitext'}}\n"
    )
    r = augdag(
        tmp_path, "export-arm", "ct", "-o", str(tmp_path / "o"), "--for", "opustrainer", "-c", "p.yaml", "--cache", str(cache)
    )
    assert r.returncode == 0, r.stdout + r.stderr
    config = (tmp_path / "o" / "config.yml").read_text()
    assert "modifiers:\n- TitleCase: 0.2\n- RemoveEndPunct: 0.1\nseed: 11\n" in config and r.stderr == ""
    fresh = augdag(
        tmp_path, "export-arm", "fresh", "-o", str(tmp_path / "f"), "--for", "hf", "-c", "p.yaml", "--cache", str(cache)
    )
    assert (fresh.returncode, " ".join(fresh.stderr.split())) == (
        2,
        "error: arm 'fresh' has never been built: the catalog has no training_mix of it. Hint: augdag run train_nmt with "
        "this profile builds it",
    )
