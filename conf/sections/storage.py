"""Where a run's artifacts live: under the cache directory, or on an object store (storage/objects/)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, field_validator

from conf.base import ConfModel

ARTIFACTS_ENV = "AUGDAG_ARTIFACTS"
SCRATCH_ENV = "AUGDAG_SCRATCH"
OBJECT_STORES = ("s3", "gs", "gcs", "abfs", "abfss")  # as storage/objects/'s SCHEMES


class StorageConf(ConfModel):
    # None: <cache>/artifacts and <cache>/models. An object-store URI (s3://bucket/prefix): the artifacts and
    # models go there, the catalog, logs and reports stay in the cache; overridden by $AUGDAG_ARTIFACTS
    artifacts: str | None = None
    # a store that is down or silent fails in bounded time (storage/objects/reach.py): each request gives up after
    # connect_timeout_s to connect or read_timeout_s without a byte, and is tried `retries` more times
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(2, ge=0, le=10)

    @field_validator("artifacts")
    @classmethod
    def _object_store(cls, value: str | None) -> str | None:
        return None if value is None else object_store(value)


def object_store(value: str) -> str:
    """``value`` as an object-store prefix (``s3://bucket/prefix``, no trailing slash), or a ValueError saying why."""
    parts = urlsplit(value)
    if parts.scheme.lower() not in OBJECT_STORES:
        raise ValueError(
            f"{value!r} is not an object-store URI: write s3://BUCKET/PREFIX (or gs://, abfs://); leave it unset to "
            "keep artifacts under the cache directory"
        )
    if not parts.netloc:
        raise ValueError(f"{value!r} names no bucket: write {parts.scheme}://BUCKET/PREFIX")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r}: a prefix has no ?query or #fragment")
    return value.rstrip("/")


def artifacts_store(conf: StorageConf, environ: Mapping[str, str] | None = None) -> str | None:
    """The object-store prefix artifacts go to: $AUGDAG_ARTIFACTS beats the profile's storage.artifacts."""
    environ = os.environ if environ is None else environ
    if environ.get(ARTIFACTS_ENV):
        try:
            return object_store(environ[ARTIFACTS_ENV])
        except ValueError as e:
            raise ValueError(f"${ARTIFACTS_ENV}: {e}") from None
    return conf.artifacts


def scratch_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where this host keeps the models of an object store it trained or fetched (once per host, by fingerprint):
    $AUGDAG_SCRATCH, else $XDG_CACHE_HOME/augdag, else ~/.cache/augdag."""
    environ = os.environ if environ is None else environ
    if environ.get(SCRATCH_ENV):
        return Path(environ[SCRATCH_ENV])
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "augdag"


def _input_location(value: object) -> object:
    """A dataset file as the profile names it: a path on this machine, or an object-store URI kept as written."""
    if isinstance(value, str) and "://" in value:
        scheme = value.split("://", 1)[0]
        if scheme.lower() not in OBJECT_STORES:
            raise ValueError(
                f"{value!r}: {scheme}:// is not read here; a dataset is a local path or an object-store URI (s3://BUCKET/KEY)"
            )
        if not urlsplit(value).netloc or value.endswith("/"):
            raise ValueError(f"{value!r}: an object-store input names a bucket and a key (s3://BUCKET/KEY)")
        return value
    return Path(value) if isinstance(value, str) else value


# a dataset's `path`, `src` or `tgt`: a Path on this machine, or an object-store URI (a str, read by storage/objects/)
InputLocation = Annotated[Path | str, BeforeValidator(_input_location)]
