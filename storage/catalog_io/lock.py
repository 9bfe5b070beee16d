"""The catalog's ``flock`` on ``catalog.lock``, with a note of who holds it.

Writers (the flow driver) hold it exclusively for one registration, readers share it for one read. While it is
held, ``catalog.holders/`` holds one small JSON file per holder: host, pid, process start, command line, mode and
since when. A process that waits for the lock says so within ``SAY_AFTER_S`` (a warning on the ``augdag.catalog``
logger: the terminal and the run's log), naming those holders, then every ``SAY_EVERY_S``, and fails with one line
naming them at ``lock_timeout_s`` (``orchestration.lock_timeout_s``). A holder that was killed leaves its file
behind; a waiter ignores the files of processes that are gone and removes them.
"""

from __future__ import annotations

import datetime
import fcntl
import functools
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from conf.errors import CatalogError
from storage.processes import Owner, current_owner, owner_alive

HOLDERS = "catalog.holders"
SAY_AFTER_S = 2.0  # a wait this long is said (the issue: within 5 s)
SAY_EVERY_S = 60.0  # and again while it lasts
log = logging.getLogger("augdag.catalog")
_serial = itertools.count()


@functools.cache
def _me(pid: int) -> tuple[Owner, str]:
    """This process (``pid``: a fork is another) and its command line as typed, one line of at most 200 characters:
    ``augdag sql ...`` for a script (the interpreter left out), ``python -m flows.cli ...``, ``python -c ...``."""
    argv = list(getattr(sys, "orig_argv", sys.argv)) or ["python"]
    if len(argv) > 1 and not argv[1].startswith("-"):
        argv = argv[1:]  # the interpreter of a script
    command = " ".join([Path(argv[0]).name, *argv[1:]])
    return current_owner(), command.encode("unicode_escape").decode("ascii")[:200]


def holders(root: Path) -> list[dict[str, object]]:
    """The live holders noted under ``root``, oldest first; the notes of processes that are gone are removed."""
    found = []
    for path in sorted((root / HOLDERS).glob("*.json")):
        try:
            note = json.loads(path.read_text(encoding="utf-8"))
            owner = Owner(str(note["host"]), int(note["pid"]), note.get("started"))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # removed meanwhile, or half written
        if owner_alive(owner):
            found.append(note)
        else:
            with suppress(OSError):
                path.unlink()
    return sorted(found, key=lambda n: str(n.get("since")))


def others_hold(root: Path) -> bool:
    """Whether a holder noted under ``root`` is another process (or none is noted: an older augdag, another host):
    the nightly's pipelines are threads of one process, and one waiting for another is no stall to report."""
    me = current_owner()
    found = holders(root)
    return not found or any((n["host"], n["pid"]) != (me.host, me.pid) for n in found)


def describe(root: Path) -> str:
    """Who holds the lock, for a message: ``pid 123 (augdag sql ...) since 03:10:05 UTC, shared``."""
    found = holders(root)
    if not found:
        return "no holder noted (a process of an older augdag, or another host's clock)"
    return "; ".join(f"pid {n['pid']} on {n['host']} ({n['command']}) since {n['since']}, {n['mode']}" for n in found)


def _note(root: Path, mode: int) -> Path | None:
    """Write this holder's note; None when it cannot be written (a read-only cache: the lock still works)."""
    owner, command = _me(os.getpid())
    since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    note = {"host": owner.host, "pid": owner.pid, "started": owner.started, "command": command, "since": since,
            "mode": "exclusive" if mode == fcntl.LOCK_EX else "shared"}  # fmt: skip
    path = root / HOLDERS / f"{owner.pid}-{next(_serial)}.json"
    try:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(note) + "\n", encoding="utf-8")
    except OSError:
        return None
    return path


@contextmanager
def catalog_lock(root: Path, mode: int, *, timeout_s: float) -> Iterator[None]:
    """Hold ``root/catalog.lock`` in ``mode`` (``fcntl.LOCK_SH`` or ``LOCK_EX``), noted in ``catalog.holders/``.

    Raises:
        CatalogError: not locked within ``timeout_s``; the message names the holders.
    """
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / "catalog.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start = time.monotonic()
        wait, say_at = 0.005, start + SAY_AFTER_S
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if now - start > timeout_s:
                    raise CatalogError(
                        f"{lock_path}: could not lock the catalog within {timeout_s:.0f} s "
                        f"(orchestration.lock_timeout_s); held by {describe(root)}"
                    ) from None
                if now >= say_at and not others_hold(root):  # this process's own threads take turns: no news
                    say_at = now + SAY_EVERY_S
                elif now >= say_at:
                    log.warning(
                        "waiting %.0f s for the catalog lock %s, held by %s; waiting up to %.0f s "
                        "(orchestration.lock_timeout_s)",
                        now - start, lock_path, describe(root), timeout_s,
                    )  # fmt: skip
                    say_at = now + SAY_EVERY_S
                time.sleep(wait)
                wait = min(wait * 2, 0.25)
        note = _note(root, mode)
        try:
            yield
        finally:
            if note is not None:
                with suppress(OSError):
                    note.unlink()  # before the lock goes: a waiter never sees a note of a released lock
    finally:
        os.close(fd)  # closing the descriptor releases the lock
