"""Where the cache is: ``resolve_cache`` and its defaults, apart from the schema (conf/schema.py) so that commands that
only open a cache (`augdag sql`, `why`, `export`, `views`) start without building the profile's pydantic models."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_CACHE = Path(".augdag")
CACHE_ENV = "AUGDAG_CACHE"


def resolve_cache(conf_cache: Path | None, cli_cache: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The cache root: ``--cache`` beats ``AUGDAG_CACHE`` (read from ``environ``, default ``os.environ``)
    beats the profile beats ``.augdag/``."""
    environ = os.environ if environ is None else environ
    if cli_cache is not None:
        return Path(cli_cache)
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    return Path(conf_cache) if conf_cache is not None else DEFAULT_CACHE
