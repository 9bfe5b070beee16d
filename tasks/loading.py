"""Models loaded once per process and shared by every shard thread, one load at a time.

transformers' ``from_pretrained`` is not thread-safe: two concurrent loads in shard threads can leave
weights on the meta device. ``loaded(load)`` wraps a loader so that each distinct argument tuple loads
once (an LRU of ``maxsize``) under one process-wide lock.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

LOADING = threading.Lock()


def loaded(load: Callable[..., Any], *, maxsize: int = 4) -> Callable[..., Any]:
    cached = functools.lru_cache(maxsize=maxsize)(load)

    @functools.wraps(load)
    def get(*args: Any) -> Any:
        with LOADING:
            return cached(*args)

    return get
