"""The process table, as far as augdag needs it: who owns a run, whether that process still lives, and
which processes belong to a process group.

Linux keeps it in ``/proc``: field 22 of ``/proc/<pid>/stat`` is the process's start time in clock ticks
since boot, so ``(boot id, start time)`` names one process for good, where a pid alone is reused. On a
system without ``/proc`` the start time is unknown and a pid that exists counts as alive.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

PROC = Path("/proc")


@dataclasses.dataclass(frozen=True)
class Owner:
    """A process on a host: ``started`` is ``<boot id>:<start ticks>`` (None where there is no /proc)."""

    host: str
    pid: int
    started: str | None


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None if it has none."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    return raw[raw.rindex(")") + 2 :].split()  # the name, in parentheses, may hold spaces and ')'


def boot_id() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def started(pid: int) -> str | None:
    """``<boot id>:<start time in ticks>`` of process ``pid``, or None (no such process, or no /proc)."""
    fields = stat_fields(pid)
    return f"{boot_id()}:{fields[19]}" if fields else None


def current_owner() -> Owner:
    return Owner(socket.gethostname(), os.getpid(), started(os.getpid()))


def owner_alive(owner: Owner) -> bool:
    """False only when it is certain that the process is gone: same host, and the pid is free, a zombie,
    or another process (a different start time). Another host's process cannot be checked: alive."""
    if owner.host != socket.gethostname():
        return True
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    fields = stat_fields(owner.pid)
    if fields is None:
        return not PROC.joinpath("self").exists()  # with /proc, a pid without a stat file is gone
    if fields[0] in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    return owner.started is None or owner.started == started(owner.pid)


def group_members(pgid: int) -> list[int]:
    """The living (not zombie) processes of process group ``pgid``, from /proc; [] without /proc."""
    members = []
    for entry in PROC.glob("[0-9]*"):
        fields = stat_fields(int(entry.name))
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return sorted(members)


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in PROC.glob("[0-9]*"):
        fields = stat_fields(int(entry.name))
        if fields and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return sorted(found)
