"""`augdag --help` as a user reads it (issue 13, defect 12)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("command", [[], ["sql"], ["serve"], ["runs"]])
def test_help_shows_no_python_type_for_flags(command, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", *command, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "100"},
        timeout=60,
    )
    assert done.returncode == 0
    assert "<bool>" not in done.stdout
    assert [line.split()[:2] for line in done.stdout.splitlines() if "--help" in line] == [["│", "--help"]]
