"""torch's process-global state, owned in one place: its random generators, its thread count, model loads.

torch keeps one default generator (per device) and one intra-op thread pool per process, and the nightly
runs pipelines in threads of one process: a stage that seeds the global generator, or sets the thread
count, changes what another thread's stage draws or how its reductions are ordered. So (docs/architecture.md,
"A fingerprint names its bytes"):

- **Draws.** An explicit ``torch.Generator`` / ``np.random.Generator`` wherever an API takes one. Where none
  can be passed (dropout, initialisation, fairseq's sampling, ``generate``'s sampling), the block runs inside
  ``seeded(seed)``: it holds ``STATE``, the one process-wide lock that owns the global generators, seeds them,
  and gives the previous state back on the way out. Training holds it one optimiser step at a time (each
  step seeded by ``step_seed(seed, step)``), so pipelines training side by side interleave without touching
  each other's draws.
- **Threads.** One count per process: ``fix_torch_threads``, called by the flow driver when a run starts,
  before any stage (``orchestration.torch_threads``), decides it; a model's own ``threads`` request
  (``torch_threads``, at load) applies only in a process where no run fixed the count (a REPL, a test).
  Subprocesses (fairseq training, benchmarks) set their own.
- **Loads.** Every ``from_pretrained``, ``torch.load`` and CTranslate2 load runs inside ``loading()``, the
  same lock: transformers' loading is not thread-safe (concurrent loads left weights on the meta device) and
  fairseq's ``torch.load`` allow-list (``safe_globals``) is process-global too. One lock rather than two:
  an HF classifier initialises its new head (a draw) inside its load, and a loader may build such a model,
  so two locks would be taken in both orders.

Written by hand: torch has no per-thread generator or thread pool to use instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

STATE = threading.RLock()  # owns torch's global generators and serialises model loads (re-entrant: a load may seed)

_fixed_threads: int | None = None  # the count a run fixed for this process (fix_torch_threads)
_default_threads: int | None = None  # torch's own count before anything here changed it


def step_seed(seed: int, *stream: int) -> int:
    """A 63-bit torch seed for (seed, stream…) (e.g. the optimiser step), independent of Python's hash salt."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(1, np.uint64)[0] >> np.uint64(1))


@contextlib.contextmanager
def seeded(seed: int, device: str = "cpu") -> Iterator[None]:
    """Own torch's global generators for a block: hold ``STATE``, seed the CPU generator (and every CUDA one
    when ``device`` is cuda) with ``seed``, and restore the previous states after the block."""
    import torch

    with STATE:
        cuda = device == "cuda" and torch.cuda.is_available()
        with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
            # the generators this block draws from, not torch.manual_seed: that one also queues a lazy seed for
            # every accelerator API not yet initialised (CUDA, MTIA, XPU), each with traceback.format_stack() of
            # the caller (~0.7 ms at a flow thread's depth, once per optimiser step: ~5 % of the demo's CPU)
            torch.default_generator.manual_seed(seed)
            if cuda:
                torch.cuda.manual_seed_all(seed)
            yield


@contextlib.contextmanager
def global_state() -> Iterator[None]:
    """Hold ``STATE`` for a block that sets another library's process-wide random state (CTranslate2's
    ``set_random_seed``, read when a worker thread first samples)."""
    with STATE:
        yield


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Hold the process-wide lock for a model load (``from_pretrained``, ``torch.load``, a CTranslate2 model)."""
    with STATE:
        yield


def loaded(load: Callable[..., Any], *, maxsize: int = 4) -> Callable[..., Any]:
    """``load`` once per distinct argument tuple (an LRU of ``maxsize``), inside ``loading()``: shard threads
    that need the same model wait for the first load and share it."""
    cached = functools.lru_cache(maxsize=maxsize)(load)

    @functools.wraps(load)
    def get(*args: Any) -> Any:
        with loading():
            return cached(*args)

    get.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return get


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def fix_torch_threads(threads: int) -> None:
    """Fix torch's intra-op thread count for this process (0: torch's own default, the cores it found at
    start-up): later ``torch_threads`` requests apply it instead of theirs. Called by the flow driver when a
    run starts, before any stage; a no-op when the count is already this one (the nightly's pipelines all
    start runs with the same profile while others compute). torch is not imported for it: a run that loads
    no torch model (ingest, a cached night) does not pay for the import, and the count applies at the first
    model load."""
    global _fixed_threads
    with STATE:
        _fixed_threads = threads
        if "torch" in sys.modules:
            _apply(threads)


def with_threads(count: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with torch's thread count fixed at ``count`` in this process (a fork's: the count
    its parent would have trained with, ``models.nmt.fairseq_zygote.in_fork``)."""
    fix_torch_threads(count)
    return fn(*args, **kwargs)


def torch_threads(threads: int = 0) -> int:
    """A model's request for ``threads`` CPU threads (0: every core this process may use), made when it loads.
    In a run the run's count applies instead (``fix_torch_threads``), whatever each model asks, so no stage
    changes another's reductions. Returns the count in force."""
    with STATE:
        if _fixed_threads is not None:
            return _apply(_fixed_threads)
        return _apply(threads or _cores())


def _apply(threads: int) -> int:
    """Set torch's count to ``threads`` (0: its default) unless it is that already; callers hold ``STATE``."""
    global _default_threads
    import torch

    if _default_threads is None:
        _default_threads = torch.get_num_threads()
    want = threads or _default_threads
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)
    return want
