"""`augdag run ingest` on a cache whose file system fills up (issue 48, defect 7): one line naming the file that could
not be written and exit 1, where it used to be 3,049 lines of "--- Logging error ---" ending in a RecursionError.

A real tmpfs of a few kB (the first files: input hashes, the catalog's creation) and of 2 MB (the catalog's checkpoint
after the first stage), mounted in a mount namespace of the one `augdag` process (``unshare -m`` as root,
``unshare -rm`` otherwise); skipped where neither may mount."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import subprocess_env

PROFILE = "datasets:\n  train: {kind: bitext, format: text, src: data/train.en, tgt: data/train.de}\n"


def _in_a_tmpfs(mount: Path, size: str) -> list[str]:
    """The argv prefix that runs a command with a fresh tmpfs of ``size`` on ``mount``; skips where none can be had."""
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    prefix = [*unshare, "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs "$0" && exec "$@"', str(mount)]
    if not shutil.which("unshare") or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("no tmpfs can be mounted here (unshare -m as root, or user namespaces)")
    return prefix


@pytest.mark.parametrize(
    ("size", "first"),
    [("64k", r"input-hashes/\.\w+\.sha256\.\d+\.\w+\.tmp"), ("2m", r"catalog\.duckdb")],
    ids=["first-files", "catalog-checkpoint"],
)
def test_a_full_disk_is_one_line_naming_the_file_and_exit_1(tmp_path, size, first):
    (tmp_path / "data").mkdir()
    (tmp_path / "data/train.en").write_text("a b\nc d\ne f\n", encoding="utf-8")
    (tmp_path / "data/train.de").write_text("x y\nz w\nu v\n", encoding="utf-8")
    (tmp_path / "p.yaml").write_text(PROFILE, encoding="utf-8")
    mount = tmp_path / "disk"
    mount.mkdir()
    argv = [sys.executable, "-m", "flows.cli", "run", "ingest", "--config", "p.yaml", "--cache", str(mount / "cache")]
    done = subprocess.run(
        [*_in_a_tmpfs(mount, size), *argv],
        env=subprocess_env(tmp_path, COLUMNS="200"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert re.fullmatch(
        rf"error: no space left on device: could not write {re.escape(str(mount))}/cache/{first} \(free some space there\)",
        lines[-1],
    ), done.stderr
    # before it at most a warning of the moment (Prefect's result not written, a catalog check that failed): no
    # traceback, no logging error, no recursion
    assert len(lines) <= 3 and not re.search("Traceback|Logging error|RecursionError|nanobind", done.stderr), done.stderr
