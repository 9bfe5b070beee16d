"""The error hierarchy every layer raises.

A message starts with the place (``path:line``, a dotted key, a column, a shard), then what was
expected and what was found, then a hint. The CLI maps ``ConfError``/``InputError`` to exit code 2
and everything else raised during a run to exit code 1.
"""

from __future__ import annotations


class AugdagError(Exception):
    """Base of every error augdag raises on purpose."""

    exit_code = 1


class ConfError(AugdagError):
    """A profile, an override or an environment variable is wrong."""

    exit_code = 2


class InputError(AugdagError):
    """An input file cannot be read as configured (whole-file problems; bad rows go to rejects)."""

    exit_code = 2


class ArtifactError(AugdagError):
    """An artifact on disk is missing, incomplete or does not match its manifest."""


class CatalogError(AugdagError):
    """The catalog could not be opened or a query was refused."""

    exit_code = 2


class StageError(AugdagError):
    """A stage failed on one or more shards; the message names them."""


class ModelError(AugdagError):
    """A model could not be loaded or refused its input."""
