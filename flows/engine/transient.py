"""Which errors a shard or model task retries: only transient ones (I/O, timeouts, memory).

Bad input, bad configuration, a missing model or a bug fail the task at once: they would fail the same
way again, and retrying them with backoff only delays the one-line error the user needs.
"""

from __future__ import annotations

from typing import Any

# errors that may pass on a second try; every other error fails its shard at once
TRANSIENT = (OSError, MemoryError)  # OSError: I/O, and TimeoutError, ConnectionError are OSErrors
NOT_TRANSIENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)  # the same next time
# (module, class) matched without importing torch: torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
TRANSIENT_BY_NAME = {("torch", "OutOfMemoryError"), ("torch.cuda", "OutOfMemoryError")}


def is_transient(error: BaseException) -> bool:
    """I/O errors (but a missing file, a denied permission, a directory where a file belongs), timeouts,
    connection errors and out-of-memory errors, CUDA's included."""
    if isinstance(error, NOT_TRANSIENT):
        return False
    if isinstance(error, TRANSIENT):
        return True
    return any((c.__module__, c.__name__) in TRANSIENT_BY_NAME for c in type(error).__mro__)


def retry_transient(_task: Any, _task_run: Any, state: Any) -> bool:
    """Prefect's retry condition of every shard and model task: retry only a transient error (``is_transient``)."""
    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 — a result that cannot be read is not worth a retry
        return False
    return isinstance(error, BaseException) and is_transient(error)
