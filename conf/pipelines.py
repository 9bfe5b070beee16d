"""The pipeline names a profile may enable, and each one's profile checks.

The registry of pipelines lives in the flows layer (flows/engine/registry.py: flow, dependencies, views,
summary); registering one declares its name here, so the schema validates ``pipelines:`` against the
registry without conf importing flows. A check runs when the pipeline is enabled (e.g. "the profile
has a bitext dataset") and raises ValueError, which the loader reports as ``<file>:<line>: <key> ...``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conf.roles import check_dataset_uses

Check = Callable[[Any], object]  # called with the AugdagConf being validated

DECLARED: dict[str, Check | None] = {}


def declare(name: str, check: Check | None = None) -> None:
    """Make ``name`` a valid entry of a profile's ``pipelines:``, with its check."""
    DECLARED[name] = check


def retract(name: str) -> None:
    DECLARED.pop(name, None)


def known_pipeline(name: str) -> str:
    """``name`` if it is declared (the validator of each entry of ``pipelines:``), else ValueError."""
    if name not in DECLARED:
        known = ", ".join(DECLARED) or "none (import flows, which registers them)"
        raise ValueError(f"unknown pipeline; expected one of {known}")
    return name


def check_enabled(names: list[str], conf: Any) -> None:
    """Each enabled pipeline's check on ``conf``, then the profile-wide check of what the datasets are used for
    (conf/roles.py: a held-out set is not trained on)."""
    for name in names:
        if (check := DECLARED[name]) is not None:
            check(conf)
    check_dataset_uses(conf)
