"""Issue 49, hand-offs to the trainers, end to end (`make test-e2e`, ~2 minutes on 2 cores): a minimal
`[ingest, train_nmt]` profile trains one arm (10 copies of the bitext and 1 of a selection, continued on the bitext)
for 4 updates, then `augdag export-arm` writes it for each trainer as a user runs it: Marian's and fairseq's files
are line-aligned with the bytes of the `training_mix` rows (no quote added), `datasets.load_from_disk` reads the hf
directory, and OpusTrainer 0.5's own `opustrainer-train` reads the curriculum and feeds its first batch to a `head`
trainer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import augdag


def _profile(tmp_path: Path, data: Path) -> Path:
    profile = tmp_path / "arm.yaml"
    profile.write_text(
        f"""shard_size: 200
pipelines: [ingest, train_nmt]
datasets:
  demo_bitext: {{kind: bitext, format: text, src: {data}/train.en, tgt: {data}/train.de, src_lang: en, tgt_lang: de}}
  demo_test: {{kind: bitext, format: text, src: {data}/test.en, tgt: {data}/test.de}}
robustness:
  seed: 3
  modifiers: [{{UpperCase: 0.1}}, {{Typos: 0.05, char_swap: 0.2}}, {{Tags: 0.05}}]
heldout: {{allow_overlap: [demo_test]}}
train_nmt:
  tests: [demo_test]
  experiments:
    para:
      mix:
        bitext: "SELECT src, tgt FROM bitext"
        short: "SELECT src, tgt FROM bitext WHERE length(src) < 30"
      copies: {{bitext: 10}}
      continue_on: {{mix: {{bitext: "SELECT src, tgt FROM bitext"}}, max_update: 2}}
  student: {{threads: 1, train: {{max_update: 4, warmup_updates: 2}}}}
"""
    )
    return profile


def _rows(tmp_path: Path, cache: Path, sql: str) -> list[dict]:
    r = augdag(tmp_path, "sql", sql, "--cache", str(cache), "-f", "json")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_an_arm_trained_by_train_nmt_is_exported_for_every_trainer_issue_49(tmp_path):
    from demo import write_demo

    data, cache = tmp_path / "data", tmp_path / "cache"
    write_demo(data, seed=5, bitext_rows=200, mono_rows=10, labeled_rows=10, slots_rows=10, test_rows=30)
    night = augdag(tmp_path, "nightly", "--config", str(_profile(tmp_path, data)), "--cache", str(cache))
    assert night.returncode == 0, night.stdout + night.stderr
    mix = _rows(
        tmp_path,
        cache,
        "SELECT phase, source, copy, src, tgt FROM training_mix WHERE arm = 'para' ORDER BY phase DESC, line",
    )
    train = [r for r in mix if r["phase"] == "train"]
    entries = {s: sum(r["source"] == s and r["copy"] == 0 for r in train) for s in ("bitext", "short")}
    assert {r["copy"] for r in train if r["source"] == "bitext"} == set(range(10)) and entries["short"] > 0

    for trainer in ("marian", "fairseq"):
        out = tmp_path / trainer
        r = augdag(tmp_path, "export-arm", "para", "-o", str(out), "--for", trainer, "--cache", str(cache))
        assert r.returncode == 0, r.stdout + r.stderr
        for phase in ("train", "continue"):
            rows = [m for m in mix if m["phase"] == phase]
            src = (out / f"{phase}.en").read_bytes().decode("utf-8").split("\n")[:-1]
            tgt = (out / f"{phase}.de").read_bytes().decode("utf-8").split("\n")[:-1]
            assert (len(src), len(tgt)) == (len(rows), len(rows))  # line-aligned, one line per row read
            assert list(zip(src, tgt)) == [(m["src"], m["tgt"]) for m in rows]  # the bytes, no quoting added

    hf = tmp_path / "hf"
    assert augdag(tmp_path, "export-arm", "para", "-o", str(hf), "--for", "hf", "--cache", str(cache)).returncode == 0
    import datasets

    d = datasets.load_from_disk(str(hf))
    assert {k: v.num_rows for k, v in d.items()} == {"train": len(train), "continue": len(mix) - len(train)}
    assert "| bitext | clean | demo_bitext |" in (hf / "README.md").read_text()

    ot = tmp_path / "ot"
    r = augdag(tmp_path, "export-arm", "para", "-o", str(ot), "--for", "opustrainer", "--cache", str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    config = yaml.safe_load((ot / "config.yml").read_text())
    total = 10 * entries["bitext"] + entries["short"]
    assert config["train"]["mix"] == [
        f"bitext {10 * entries['bitext'] / total}",
        f"short {entries['short'] / total}",
        "until bitext 10",
    ]
    assert config["modifiers"] == [{"UpperCase": 0.1}, {"Typos": 0.05, "char_swap": 0.2}]  # Tags left out, said
    assert "Tags: left out" in r.stderr
    opustrainer = shutil.which("opustrainer-train", path=str(Path(sys.executable).parent))
    if opustrainer is None:
        pytest.skip(
            "OpusTrainer 0.5 is not installed (bench/modifiers.py: uv pip install --no-deps opustrainer==0.5 typo==0.1.5)"
        )
    batch = subprocess.run(
        [opustrainer, "-c", str(ot / "config.yml"), "--sync", "-d", "-j", "1", "-b", "50", "head", "-n", "40"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert batch.returncode == 0, batch.stderr
    lines = batch.stdout.splitlines()
    assert len(lines) == 40 and all(len(line.split("\t")) == 2 for line in lines)
    pairs = {f"{m['src']}\t{m['tgt']}".lower() for m in mix}
    unchanged = [line for line in lines if line.lower() in pairs]
    assert len(unchanged) >= 20  # the rest: a typo or upper-cased, by OpusTrainer's own modifiers
