"""A pipeline's independent model trainings, a few at once: ``at_once({key: call}, workers)``.

Each call runs in a thread of its own with a copy of the caller's context (Prefect's flow run, the run log), so its
tasks and records belong to the run as if it ran in the flow's thread. The trainings themselves run in processes
(fairseq's, or ``models.nmt.fairseq_zygote.in_fork``): the threads only wait on them. A failed call raises once every
call has ended, so the others' models are trained and cached for the rerun.

Hand-written: ``concurrent.futures`` does the pooling; this is its use with the context copied and the results in the
calls' order.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


def at_once(calls: Mapping[K, Callable[[], T]], workers: int) -> dict[K, T]:
    """``{key: call()}`` in ``calls``' order, at most ``workers`` calls running at once (1: one after the other, in
    this thread); the first failure (in ``calls``' order) is raised after all have ended."""
    if min(workers, len(calls)) <= 1:
        return {key: call() for key, call in calls.items()}
    with ThreadPoolExecutor(max_workers=min(workers, len(calls)), thread_name_prefix="at_once") as pool:
        futures = {key: pool.submit(contextvars.copy_context().run, call) for key, call in calls.items()}
        wait(futures.values())
    return {key: future.result() for key, future in futures.items()}
