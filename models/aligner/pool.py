"""The thread pool the kernels run on: serial `@njit(nogil=True)` functions, one task per sentence chunk or
table block, so threads overlap while the GIL is released. How many threads run changes no bit: each task
writes its own rows, which the caller reduces in task order."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def n_threads(threads: int | None) -> int:
    """Worker threads (None: the CPUs this process may use)."""
    return max(1, int(threads)) if threads is not None else max(1, len(os.sched_getaffinity(0)))


def run_tasks(threads: int, n_tasks: int, task: Callable[[int], None]) -> None:
    """task(0 … n_tasks−1) on `threads` threads (the kernels release the GIL); in order when threads = 1."""
    if threads == 1 or n_tasks <= 1:
        for k in range(n_tasks):
            task(k)
        return
    with ThreadPoolExecutor(min(threads, n_tasks)) as pool:
        list(pool.map(task, range(n_tasks)))
