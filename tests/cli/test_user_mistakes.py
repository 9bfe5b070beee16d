"""Every user mistake is one line on the terminal and exit 2, never a traceback (issue 26, defect 7).

Each case is a real `augdag` subprocess, as a user would type it; the cases run a few at a time (each
costs an interpreter start). A case names the words its one line must hold, so a mistake caught by the
wrong check (say, "no such file" for a directory) fails too."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import subprocess_env

GOOD = "datasets:\n  train: {kind: bitext, format: text, src: data/train.en, tgt: data/train.de}\n"


def _profile(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text, encoding="utf-8")
    return str(tmp / name)


def _cases(tmp: Path, cache: str) -> list[tuple[str, list[str], list[str]]]:
    """(what, argv after `augdag`, words the one line must hold)."""
    p = lambda name, text: _profile(tmp, name, text)  # noqa: E731
    missing = str(tmp / "no-cache-here")
    return [
        ("unknown pipeline", ["run", "nosuch", "--cache", cache], ["nosuch"]),
        ("no such profile", ["run", "ingest", "--config", "nosuch.yaml", "--cache", cache], ["nosuch.yaml"]),
        (
            "--set without =",
            ["run", "ingest", "--config", p("a.yaml", GOOD), "--set", "shard_size", "--cache", cache],
            ["--set", "KEY=VALUE"],
        ),
        (
            "--set of a wrong type",
            ["run", "ingest", "--config", p("b.yaml", GOOD), "--set", "shard_size=lots", "--cache", cache],
            ["--set shard_size=lots"],
        ),
        (
            "unknown key",
            ["run", "ingest", "--config", p("c.yaml", GOOD + "shard_sise: 5\n"), "--cache", cache],
            ["c.yaml:3", "shard_sise", "unknown key"],
        ),
        (
            "duplicate key",
            ["run", "ingest", "--config", p("d.yaml", GOOD + "shard_size: 5\nshard_size: 6\n"), "--cache", cache],
            ["d.yaml:4", "duplicate key"],
        ),
        (
            "unset variable",
            ["run", "ingest", "--config", p("e.yaml", GOOD.replace("data/train.en", '"${NOPE_X}/t.en"')), "--cache", cache],
            ["e.yaml:2", "NOPE_X"],
        ),
        ("YAML syntax", ["run", "ingest", "--config", p("f.yaml", "datasets: [\n"), "--cache", cache], ["f.yaml"]),
        (
            "missing input",
            ["run", "ingest", "--config", p("g.yaml", GOOD.replace("train.en", "nope.en")), "--cache", cache],
            ["nope.en", "no such file"],
        ),
        (
            "input is a directory",
            ["run", "ingest", "--config", p("h.yaml", GOOD.replace("data/train.en", "data")), "--cache", cache],
            ["directory"],
        ),
        (
            "pipeline's section has no dataset",
            ["run", "self_training", "--config", p("i.yaml", GOOD), "--cache", cache],
            ["self_training.mono", "mono"],
        ),
        (
            "wrong dataset name",
            [
                "run",
                "ingest",
                "--config",
                p("j.yaml", "pipelines: [ingest, rejuvenation]\n" + GOOD + "rejuvenation:\n  bitext: trian\n"),
                "--cache",
                cache,
            ],
            ["j.yaml:5", "rejuvenation.bitext", "'trian'", "['train']"],
        ),
        (
            "unknown encoding",
            ["run", "ingest", "--config", p("k.yaml", GOOD.replace("}", ", encoding: latin-99}")), "--cache", cache],
            ["encoding", "latin-99"],
        ),
        (
            "unknown tokenizer",
            [
                "run",
                "ingest",
                "--config",
                p("l.yaml", "pipelines: [ingest, self_training]\n" + GOOD + "self_training:\n  tokenizer: {kind: spacey}\n"),
                "--cache",
                cache,
            ],
            ["tokenizer", "spacey"],
        ),
        ("unknown view", ["sql", "select * from nosuchview", "--cache", cache], ["nosuchview"]),
        ("unknown column", ["sql", "select sorce from bitext", "--cache", cache], ["sorce"]),
        ("empty SQL", ["sql", "", "--cache", cache], ["statement"]),
        ("only semicolons", ["sql", ";;;", "--cache", cache], ["statement"]),
        ("SQL that writes", ["sql", "drop table runs", "--cache", cache], ["read-only"]),
        (
            "EXPLAIN ANALYZE COPY",
            ["sql", f"EXPLAIN ANALYZE COPY (select 1) TO '{cache}/catalog.duckdb'", "--cache", cache],
            ["COPY"],
        ),
        ("SQL syntax", ["sql", "selec 1", "--cache", cache], ["selec"]),
        ("unknown format", ["sql", "select 1", "--format", "xml", "--cache", cache], ["xml"]),
        (
            "--where with a typo",
            ["export", "bitext", "-o", str(tmp / "x.parquet"), "--where", "sorce='a'", "--cache", cache],
            ["sorce"],
        ),
        (
            "--where with a second statement",
            ["export", "bitext", "-o", str(tmp / "y.parquet"), "--where", "1=0; select 1", "--cache", cache],
            ["where"],
        ),
        (
            "export of an unknown view",
            ["export", "nosuchview", "-o", str(tmp / "a" / "b" / "x.parquet"), "--cache", cache],
            ["nosuchview"],
        ),
        ("-o a directory", ["sql", "select 1", "-o", str(tmp), "--cache", cache], ["directory"]),
        (
            "-o below a file",
            ["sql", "select 1", "-o", str(tmp / "data" / "train.en" / "x.csv"), "--cache", cache],
            ["train.en", "not a directory"],
        ),
        ("missing argument", ["why", "demo_bitext", "--cache", cache], ["Missing argument", "augdag why --help"]),
        ("unknown option", ["sql", "select 1", "--nosuch", "--cache", cache], ["--nosuch"]),
        (
            "format and extension disagree",
            ["sql", "select 1", "-o", str(tmp / "q.csv"), "--format", "parquet", "--cache", cache],
            ["q.csv"],
        ),
        ("sql on a missing cache", ["sql", "select 1", "--cache", missing], ["no catalog at", missing]),
        ("runs on a missing cache", ["runs", "--cache", missing], ["no catalog at"]),
        ("views on a missing cache", ["views", "--cache", missing], ["no catalog at"]),
        ("why on a missing cache", ["why", "x", "1", "--cache", missing], ["no catalog at"]),
        ("retry of an unknown run", ["retry", "ingest-nosuch", "--cache", cache], ["ingest-nosuch"]),
        ("why of an unknown row", ["why", "nosuchsource", "3", "--cache", cache], ["nosuchsource"]),
        ("nightly with no such profile", ["nightly", "--config", "nosuch-profile", "--cache", cache], ["nosuch-profile"]),
    ]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    from storage.catalog import Catalog

    tmp = tmp_path_factory.mktemp("mistakes")
    (tmp / "data").mkdir()
    (tmp / "data" / "train.en").write_text("a small house\nthe cat\n", encoding="utf-8")
    (tmp / "data" / "train.de").write_text("ein kleines Haus\ndie Katze\n", encoding="utf-8")
    cache = tmp / "cache"
    with Catalog(cache).write():  # an empty catalog: its views exist, with no rows
        pass
    env = subprocess_env(tmp, COLUMNS="300")
    cases = _cases(tmp, str(cache))

    def one(case):
        _, args, _ = case
        return subprocess.run(
            [sys.executable, "-m", "flows.cli", *args], env=env, cwd=tmp, capture_output=True, text=True, timeout=300
        )

    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(one, cases))
    return tmp, [(what, words, proc) for (what, _, words), proc in zip(cases, done, strict=True)]


def test_at_least_30_mistakes_are_each_one_line_and_exit_2(outcomes):
    tmp, results = outcomes
    assert len(results) >= 30
    wrong = []
    for what, words, proc in results:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        ok = (
            proc.returncode == 2
            and len(lines) == 1
            and "Traceback" not in proc.stderr + proc.stdout
            and lines[0].startswith("error: ")
            and all(w in lines[0] for w in words)
        )
        if not ok:
            wrong.append(f"{what}: exit {proc.returncode}, stderr {proc.stderr[-600:]!r}")
    assert not wrong, "\n".join(wrong)


def test_a_mistake_creates_nothing(outcomes):
    tmp, _ = outcomes
    assert not (tmp / "no-cache-here").exists() and not (tmp / "a").exists()
    assert not (tmp / "x.parquet").exists() and not (tmp / "y.parquet").exists() and not (tmp / "q.csv").exists()
