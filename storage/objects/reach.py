"""A store that is down or silent, in bounded time and one line (storage/objects/ ``configure``; ``reaching``).

pyarrow's S3 filesystem gives up on a request after ``connect_timeout_s`` to connect, or after ``read_timeout_s``
without a byte (on Linux too, as curl's low-speed limit, whatever pyarrow's docstring says), and tries it
``retries`` more times; without settings the AWS SDK waits 1 s and 3 s and tries 3 times. What still fails is an
``OSError`` of the SDK's many lines: ``unreachable`` makes it one ``StoreUnreachable`` that names the object, the
endpoint and the settings. Not an ``OSError``, so Prefect does not retry it again (flows/engine/transient.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conf.errors import ArtifactError


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """How long a request to the store may take (conf/sections/storage.py documents each)."""

    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    retries: int = 2


TIMEOUTS = [Timeouts()]  # this process's (``configure``)


def endpoint(scheme: str = "s3") -> str:
    """The endpoint a scheme's requests go to, as the user set it (``AWS_ENDPOINT_URL``) or AWS's default."""
    if scheme != "s3":
        return f"{scheme}://"
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3 (no AWS_ENDPOINT_URL)"


class StoreUnreachable(ArtifactError):
    """The object store did not answer: refused, unreachable, or silent past the timeouts, after its retries."""


# the AWS SDK's words for a request that never got an answer (curl 7: no connection, 28: timed out, 6: no such host)
_NETWORK = ("NETWORK_CONNECTION", "curlCode: 7,", "curlCode: 28,", "curlCode: 6,", "Couldn't resolve host")


def unreachable(error: BaseException, loc: Path | str) -> StoreUnreachable | None:
    """``error`` as one line naming ``loc`` and its store's endpoint, when it says the store did not answer."""
    text = str(error)
    if not isinstance(error, OSError) or "://" not in str(loc) or not any(w in text for w in _NETWORK):
        return None
    t, scheme = TIMEOUTS[0], str(loc).split("://", 1)[0].lower()
    why = (
        f"no byte within storage.read_timeout_s = {t.read_timeout_s:g} s"
        if "Operation too slow" in text
        else " ".join(text.rsplit("Details: ", 1)[-1].split())
    )
    tries = f"{t.retries + 1} {'try' if t.retries == 0 else 'tries'}"
    return StoreUnreachable(
        f"{loc}: the object store at {endpoint(scheme)} did not answer ({why}; {tries}, "
        f"storage.connect_timeout_s = {t.connect_timeout_s:g} s); is it running, and are AWS_ENDPOINT_URL and "
        "storage.artifacts right?"
    )


def reaching(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a store that did not answer raised as ``StoreUnreachable`` naming the object (``fn``'s first
    argument that is an object-store URI)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OSError as e:
            loc = next((a for a in (*args, *kwargs.values()) if isinstance(a, str) and "://" in a), "")
            if (down := unreachable(e, loc)) is not None:
                raise down from None
            raise

    return wrapper
