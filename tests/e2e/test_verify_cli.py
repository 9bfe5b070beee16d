"""Corruption at rest never reaches a query or a run (issue 48, defect 1), through the CLI on a copy of the session's
tiny demo cache: one bit flipped in the `clean` part of demo_bitext fails `augdag sql` and `augdag run ingest` in one
line (the run recorded failed, no shard counted as cached), `augdag verify` lists it, `verify --repair` recomputes
that shard alone with the original bytes; a deleted part is one line in `views`, `why` and `export`."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
import shutil
from pathlib import Path

import pytest

from demo.tiny import TINY_SETS
from tests.conftest import augdag, catalog_rows

pytestmark = [pytest.mark.tiny_demo_run]


@pytest.fixture
def demo_copy(tiny_demo_run, tmp_path) -> tuple[Path, Path]:
    """A copy of the finished tiny demo's cache, and the demo's data directory (read where the demo read it)."""
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    copy = tmp_path / "cache"
    ignore = shutil.ignore_patterns("server", "logs", "*.lock", "demo-data")
    with open(tiny_demo_run.cache / "catalog.lock", "a+") as lock:  # under the catalog's shared lock, as readers
        fcntl.flock(lock, fcntl.LOCK_SH)
        shutil.copytree(tiny_demo_run.cache, copy, symlinks=True, ignore=ignore)
    return copy, tiny_demo_run.cache / "demo-data"


def clean_bitext_part(cache: Path) -> Path:
    """Shard 0 of the current `clean` artifact of demo_bitext (what the `bitext` view serves)."""
    (path,) = [
        r["path"]
        for r in catalog_rows(
            cache,
            "SELECT path FROM artifacts WHERE stage = 'clean' AND dataset = 'demo_bitext' "
            "ORDER BY last_used_at DESC, created_at DESC LIMIT 1",
        )
    ]
    return cache / path / "part-00000.parquet"


def stamps(cache: Path) -> dict[str, tuple[int, int]]:
    """Every part under the cache's artifacts: relative path -> (inode, mtime_ns), which a rewrite changes."""
    return {str(p.relative_to(cache)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in (cache / "artifacts").rglob("*.parquet")}


def hint(cache: Path) -> str:
    return f"Hint: augdag verify --repair --cache {shlex.quote(str(cache.absolute()))}"


def test_a_flipped_bit_fails_sql_and_the_run_and_verify_repair_recomputes_that_part_alone_issue_48(demo_copy, tmp_path):
    cache, data = demo_copy
    part = clean_bitext_part(cache)
    original = part.read_bytes()
    flipped = bytearray(original)
    flipped[len(flipped) // 3] ^= 1
    with open(part, "r+b") as f:  # in place: same inode and size, as bit rot or a stray write leaves it
        f.write(flipped)
    recorded, found = hashlib.sha256(original).hexdigest(), hashlib.sha256(flipped).hexdigest()
    fp = part.parent.name
    differs = f"artifact clean/{fp}: part-00000.parquet differs from its manifest: recorded sha256 {recorded}, found {found}"

    q = augdag(tmp_path, "sql", "SELECT count(*) FROM bitext", "--cache", str(cache))
    assert (q.returncode, q.stdout, q.stderr) == (1, "", f"error: {differs}. {hint(cache)}\n")

    sets = [a for s in TINY_SETS for a in ("--set", s)]
    r = augdag(tmp_path, "run", "ingest", "--config", "demo", *sets, "--cache", str(cache), "-q", AUGDAG_DEMO_DATA=str(data))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines()[-1] == f"error: {differs}. {hint(cache)}"
    assert "cached" not in r.stdout
    (run,) = catalog_rows(
        cache, "SELECT run_id, status, summary FROM runs WHERE pipeline = 'ingest' ORDER BY started_at DESC LIMIT 1"
    )
    assert (run["status"], json.loads(run["summary"])["error"]) == ("failed", f"{differs}. {hint(cache)}")

    v = augdag(tmp_path, "verify", "--cache", str(cache))
    assert (v.returncode, v.stdout) == (1, f"{differs}\n")
    assert v.stderr == f"error: 1 file(s) missing or differing. Hint: augdag verify --repair --cache {cache}\n"

    parts_before = stamps(cache)
    fixed = augdag(tmp_path, "verify", "--repair", "--cache", str(cache), AUGDAG_DEMO_DATA=str(data))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    done = f"recomputed artifact clean/{fp}: part-00000.parquet (sha256 {recorded}, as its manifest records)"
    assert done in fixed.stdout.splitlines()
    assert part.read_bytes() == original
    # that part alone: every other part of the cache is the file it was (the retried run's other stages cached)
    after = stamps(cache)
    assert [f for f, stamp in parts_before.items() if after.get(f) != stamp] == [str(part.relative_to(cache))]
    (retry,) = catalog_rows(cache, "SELECT summary FROM runs ORDER BY started_at DESC LIMIT 1")
    redo = [(s["stage"], s["shards_computed"]) for s in json.loads(retry["summary"])["stages"] if s["fingerprint"] == fp]
    # one shard of it computed; on a loaded machine the summary also listed the artifact once more, cached (0 shards:
    # another task of the retry that found it made), seen once in a loaded e2e run
    assert {stage for stage, _ in redo} == {"clean"} and sum(n for _, n in redo) == 1, redo

    again = augdag(tmp_path, "verify", "--cache", str(cache))
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.endswith("every one as its manifest records\n")


@pytest.mark.parametrize(
    "command",
    [("views",), ("why", "demo_bitext", "3"), ("export", "bitext", "-o", "out.parquet"), ("sql", "FROM bitext")],
    ids=["views", "why", "export", "sql"],
)
def test_a_deleted_part_is_one_line_in_views_why_and_export_issue_48(demo_copy, tmp_path, command):
    cache, _ = demo_copy
    part = clean_bitext_part(cache)
    part.unlink()
    r = augdag(tmp_path, *command, "--cache", str(cache))
    missing = f"artifact clean/{part.parent.name}: part-00000.parquet is missing ({part.absolute()}). {hint(cache)}"
    assert (r.returncode, r.stderr) == (2, f"error: {missing}\n"), r.stdout + r.stderr
    assert not (tmp_path / "out.parquet").exists()
