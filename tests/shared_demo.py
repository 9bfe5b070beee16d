"""One `augdag demo` per test session and size, started in the background as the session starts.

Two sizes (``DEMOS``): ``demo_run``, the demo as the README runs it (`make test-e2e`: its models must learn,
~4 minutes, ~300 CPU-s on 2 cores), and ``tiny_demo_run``, `augdag demo` with demo/tiny.py's overrides (`make
test`: every pipeline at once on 300 pairs, ~110 s, ~140 CPU-s alone on 2026-12-02's host), the night that `make
test`'s crash and resume tests compare against. A demo is minutes of wall time but under one core on average: its
pipelines wait on each other's models. Run as a test, it held a pytest worker idle for those minutes; started with the session (by
whichever xdist worker gets there first, the others find it running), it overlaps with every other test, and the
tests marked with its marker wait for its result. The test processes lower their own priority once one is
started (TESTS_NICE). It starts only when such a test is selected, and exactly as a user runs it: `augdag demo`
in a subprocess, inside ``unshare -n`` (loopback only) where permitted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from demo.tiny import TINY_SETS
from tests.conftest import subprocess_env

# marker -> (directory under the session's base temp, `augdag demo`'s --set overrides)
DEMOS: dict[str, tuple[str, list[str]]] = {
    "demo_run": ("shared-demo", []),
    "tiny_demo_run": ("shared-tiny-demo", TINY_SETS),
}

# the demo's own limit, a hang detector, not a speed check: under 5 minutes alone on 2 cores, 15 on a CI host half as
# fast as this one while two xdist workers run beside it (stop 54: killed at 900 s a few stages before its end)
TIMEOUT_S = 1800
# how long a reader waits for a demo's result: a demo queued behind another (``start``'s ``after``) waits for it first
WAIT_S = 2 * TIMEOUT_S + 120
# the niceness the test processes take once the demo is started: under two busy xdist workers at the same
# priority the demo's chain of trainings stretched to the whole session (~15 min) and the last test waited for it
TESTS_NICE = 5


@dataclass(frozen=True)
class DemoRun:
    """The finished `augdag demo`: its exit code, its terminal output, the cache it wrote."""

    returncode: int
    stdout: str
    stderr: str
    cache: Path
    offline: bool


def unshare_ok() -> bool:
    """Whether ``unshare -n`` (a network namespace with loopback only) is permitted here."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0


def start(root: Path, sets: list[str], after: Path | None = None) -> subprocess.Popen | None:
    """Start the demo (with the overrides ``sets``) under ``root`` unless another worker did: the process (this
    worker owns it) or None. With ``after`` (another demo's root) it first waits for that demo to finish: two
    demos at once beside two xdist workers starved both on a slow host (stop 54)."""
    with FileLock(root / "demo.lock"):
        if (root / "started").exists():
            return None
        (root / "started").touch()
    cmd = [sys.executable, "-m", "flows.cli", "demo", "--cache", str(root / "cache"), *(a for s in sets for a in ("--set", s))]
    if unshare_ok():
        cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]
        (root / "offline").touch()
    # the exit code lands in `rc` once the output files are complete (a rename: the waiter never reads half)
    wrapped = ["timeout", "-s", "KILL", str(TIMEOUT_S), *cmd]
    script = '"$@" >stdout 2>stderr; echo $? >rc.tmp && mv rc.tmp rc'
    if after is not None:
        script = f'while [ ! -e "{after}/rc" ]; do sleep 2; done; {script}'
    return subprocess.Popen(
        ["sh", "-c", script, "sh", *wrapped], cwd=root, start_new_session=True, env=subprocess_env(root, COLUMNS="200")
    )


def wait(root: Path) -> DemoRun:
    """Block until the demo under ``root`` has finished; its result."""
    deadline = time.monotonic() + WAIT_S
    while not (root / "rc").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"`augdag demo` under {root} did not finish in {WAIT_S} s")
        time.sleep(1)
    return DemoRun(
        int((root / "rc").read_text()),
        (root / "stdout").read_text(),
        (root / "stderr").read_text(),
        root / "cache",
        (root / "offline").exists(),
    )


def stop(proc: subprocess.Popen) -> None:
    """At the session's end: let a running demo finish (another worker may be waiting for it); killed as a
    group only if this session is cut short (an interrupt while waiting)."""
    try:
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
