"""Stopping a long-lived command together with everything it started: Ctrl-C, SIGTERM and SIGHUP alike.

A process killed by a signal it does not handle runs no ``finally``, and its children live on: `augdag
server` stopped by ``kill PID`` left ``prefect server start`` holding the port, `augdag serve` left its
flow-run processes. So the children run in a session (and process group) of their own; on SIGINT,
SIGTERM or SIGHUP the command signals that group, waits up to ``grace_s`` for every member to exit,
kills what is left, and only then reaps the group's leader. Until the leader is reaped its pid, which
is the group id, cannot be reused: the group signalled is always the one started. The caller's own
group (a shell's, a test's) is never signalled.

``supervise_in_own_group`` makes a whole command such a child: it runs the same command line again in
a new session, then waits and relays the stop signals to the child's group as SIGINT (so SIGTERM and
SIGHUP behave as Ctrl-C in a terminal: every process of the group sees one KeyboardInterrupt).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from conf.errors import ConfError
from storage.processes import PROC, group_members

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 30.0  # after the first signal, before SIGKILL (AUGDAG_STOP_GRACE_S overrides it)
GRACE_ENV = "AUGDAG_STOP_GRACE_S"


class Stop(BaseException):
    """A stop signal arrived (raised in the main thread inside ``stop_signals``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """While armed, the first SIGINT, SIGTERM or SIGHUP raises ``Stop`` in the main thread; every later one
    is only recorded in ``received``, so that the cleanup after it runs to its end (it has its own timeout)."""

    def __init__(self) -> None:
        self.armed, self.received = True, []

    def disarm(self) -> None:
        """From now on a stop signal raises nothing: call it before cleaning up after a normal exit."""
        self.armed = False

    def handler(self, signum: int, _frame: Any) -> None:
        """The signal handler: record ``signum``, and raise ``Stop`` for the first signal while armed."""
        self.received.append(signum)
        if self.armed:
            self.armed = False
            raise Stop(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """SIGINT, SIGTERM and SIGHUP handled by a ``StopSignals`` inside the block (restored after it)."""
    handling = StopSignals()
    previous = {s: signal.signal(s, handling.handler) for s in STOP_SIGNALS}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # supervise_in_own_group blocks them a moment
    try:
        yield handling
    finally:
        handling.disarm()
        for s, h in previous.items():
            signal.signal(s, h)


def spawn_group(cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
    """``cmd`` in a new session: its own process group, which ``stop_group`` stops as a whole."""
    return subprocess.Popen(list(cmd), start_new_session=True, **popen)


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (its pid stays reserved as the group id)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _group_alive(pgid: int) -> bool:
    """The leader (our child) has not exited, or a member of its group lives (without /proc: the leader)."""
    return not _exited(pgid) or (PROC.joinpath("self").exists() and bool(group_members(pgid)))


def _signal_group(pgid: int, sig: int) -> None:
    """``sig`` to the group that our unreaped child ``pgid`` leads (to the child alone if it has not yet
    made its session)."""
    if pgid <= 1 or pgid == os.getpgrp():
        raise RuntimeError(f"refusing to signal process group {pgid}: not a group this process started")
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pgid, sig)


def _wait_until_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_group(pid: int, sig: int = signal.SIGTERM, *, grace_s: float = GRACE_S, signal_first: bool = True) -> int:
    """Stop the process group that child ``pid`` leads (started by ``spawn_group`` or
    ``supervise_in_own_group``): ``sig`` to the group, up to ``grace_s`` for all of it to exit, SIGKILL
    to the rest, then reap ``pid``. Returns its exit code (128 + n when killed by signal n)."""
    if signal_first:
        _signal_group(pid, sig)
    if not _wait_until_gone(pid, grace_s):
        _signal_group(pid, signal.SIGKILL)
        _wait_until_gone(pid, 10.0)
    if not PROC.joinpath("self").exists():
        _signal_group(pid, signal.SIGKILL)  # members we cannot see; the unreaped leader still holds the id
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def wait_group(pid: int, signals: StopSignals, *, relay: int = signal.SIGINT, grace_s: float = GRACE_S) -> int:
    """Inside ``stop_signals``: wait for child ``pid`` to exit, or for a stop signal, which is relayed to
    its group as ``relay``; then ``stop_group``. Returns the exit code. When the leader exits by itself,
    members it left behind get SIGTERM, then SIGKILL."""
    try:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # blocks; a stop signal's Stop breaks in
        signals.disarm()
    except Stop:
        return stop_group(pid, relay, grace_s=grace_s)
    return stop_group(pid, signal.SIGTERM, grace_s=grace_s, signal_first=_group_alive(pid))


SUPERVISED = "AUGDAG_SUPERVISED"  # set in the child of supervise_in_own_group


def stop_grace_s() -> float:
    """Seconds a stopped command gives its processes to exit before SIGKILL: ``$AUGDAG_STOP_GRACE_S``, else 30. A
    flow run that is stopped reports its state to the Prefect server first, which a busy SQLite server can make
    take longer than that."""
    raw = os.environ.get(GRACE_ENV)
    if raw is None:
        return GRACE_S
    try:
        grace = float(raw)
    except ValueError:
        grace = -1.0
    if not 0 < grace < float("inf"):
        raise ConfError(f"{GRACE_ENV}={raw!r}: expected a number of seconds > 0")
    return grace


def supervise_in_own_group(*, grace_s: float | None = None) -> None:
    """Run this command line again as a child in a session of its own, wait for it while relaying SIGINT,
    SIGTERM and SIGHUP to its group as SIGINT, and exit with its exit code. In that child, and when this
    process is not the `augdag` command line (a test calling the command in-process), return at once.

    Call it first in a long-lived command whose process starts others: Prefect's Runner (`augdag serve`)
    runs each flow run as a subprocess, which a SIGTERM or SIGHUP to the command alone would leave running."""
    if os.environ.pop(SUPERVISED, None):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the parent across the start
        return
    command = Path(sys.argv[0])
    if command.name != "augdag" and command.parts[-2:] != ("cli", "__main__.py"):  # not `augdag`, `python -m flows.cli`
        return
    grace_s = stop_grace_s() if grace_s is None else grace_s  # a bad $AUGDAG_STOP_GRACE_S fails before any start
    sys.stdout.flush()
    sys.stderr.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # until the handlers below are in place
    proc = spawn_group([sys.executable, *sys.orig_argv[1:]], env={**os.environ, SUPERVISED: "1"})
    with stop_signals() as signals:  # a signal that came meanwhile is handled now
        code = wait_group(proc.pid, signals, relay=signal.SIGINT, grace_s=grace_s)
    sys.exit(code)
