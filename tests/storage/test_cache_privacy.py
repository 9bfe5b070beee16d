"""A cache made private stays private (issue 48, "Also: permissions"; storage/cache_root.py ``keep_private``).

Each case in its own interpreter: ``keep_private`` changes the process's umask, for good."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

PROBE = """
import os, sys
from pathlib import Path
from storage.cache_root import keep_private
os.umask(0o022)
root = Path(sys.argv[1])
if sys.argv[2] != "absent":
    root.mkdir(mode=int(sys.argv[2], 8))
    os.chmod(root, int(sys.argv[2], 8))
in_force = keep_private(root)
root.mkdir(exist_ok=True)
(root / "artifacts").mkdir()
(root / "artifacts" / "part.parquet").write_bytes(b"x")
fd = os.open(root / "catalog.lock", os.O_RDWR | os.O_CREAT, 0o644)
os.close(fd)
made = (root / "artifacts", root / "artifacts" / "part.parquet", root / "catalog.lock")
print(oct(in_force), *(oct(p.stat().st_mode & 0o777) for p in made))
"""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("700", "0o77 0o700 0o600 0o600"),  # private: nothing for the group or others
        ("750", "0o27 0o750 0o640 0o640"),  # the group reads, as it reads the cache
        ("755", "0o22 0o755 0o644 0o644"),  # the umask as it was
        ("absent", "0o22 0o755 0o644 0o644"),  # a cache augdag makes: made with the umask, as its files
    ],
)
def test_files_made_after_keep_private_have_no_bit_the_cache_directory_lacks(tmp_path, mode, expected):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "cache"), mode], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected.split()
