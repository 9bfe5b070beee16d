"""What is stored of a configuration: a value read from the environment in its ``${VAR}`` form, never resolved.

The loader (conf/loader.py) resolves ``${VAR}`` for the run, and notes here every key whose value came from the
environment, with the text the profile wrote for it, and every environment value it used. What goes to rest
(``runs.config``, artifact manifests, Prefect flow-run parameters, logs, run summaries) is then:

- the configuration, ``at_rest``: each noted key as the profile wrote it (``${AWS_SECRET_ACCESS_KEY}``), and
  every other ``$`` written ``$$``. That is the profile's own syntax: ``conf.loader.load_recorded`` resolves it
  again from the environment of the process that reads it (a retry, a deployment's worker). A fingerprint that
  needs a value hashes the resolved configuration and stores only the hash.
- anything else (a stage's parameters, a log line), ``redact``: every noted environment value replaced by its
  ``${VAR}``; a value shorter than ``MIN_INSIDE`` characters only where it is a whole string, not inside one.

The notes are per process and only grow: a value once read from the environment is never written again.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Mapping
from typing import Any

MIN_INSIDE = 6  # a shorter environment value (`en`, `4`) is redacted as a whole string only
_written: dict[tuple[str, str], str] = {}  # (dotted key, resolved value as JSON) -> the text the profile wrote
_values: dict[str, str] = {}  # a value read from the environment -> its ${NAME}
_lock = threading.Lock()


def note_value(name: str, value: str) -> None:
    """Environment variable ``name`` gave ``value`` to a configuration: never store ``value``."""
    if value:
        with _lock:
            _values.setdefault(value, f"${{{name}}}")


def note_key(key: str, value: Any, written: str) -> None:
    """Key ``key`` (dotted, list items by index) resolved to ``value`` from ``written``, a text with ``${VAR}``."""
    with _lock:
        _written[(key, json.dumps(value, sort_keys=True, default=str))] = written


def note_keys(dump: Mapping[str, Any], written: Mapping[str, str], replaced: Collection[str] = ()) -> None:
    """``note_key`` for each dotted key of ``written`` (key -> text as written) at its value in ``dump`` (a
    configuration's JSON dump), except where a key in ``replaced`` (``--set``) is it, inside it or around it."""
    for key, text in written.items():
        if any(key == r or key.startswith(r + ".") or r.startswith(key + ".") for r in replaced):
            continue
        value: Any = dump
        for part in key.split("."):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                break
        else:
            note_key(key, value, text)


def at_rest(dump: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration's JSON dump (``AugdagConf.model_dump(mode="json")``) as stored: the keys noted by
    ``note_key`` in their written form, ``$`` elsewhere doubled, any other environment value redacted."""

    with _lock:
        noted = {k for k, _ in _written}

    def walk(value: Any, key: str) -> Any:
        if key in noted and (written := _written.get((key, json.dumps(value, sort_keys=True, default=str)))) is not None:
            return written
        if isinstance(value, Mapping):
            return {k: walk(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{key}.{i}") for i, v in enumerate(value)]
        if isinstance(value, str):
            return _replace(value, escape=True)
        return value

    return walk(dict(dump), "")


def redact(value: Any) -> Any:
    """``value`` (a string, or JSON-like data of them) with every environment value noted replaced by ``${VAR}``."""
    if isinstance(value, str):
        return _replace(value, escape=False)
    if isinstance(value, Mapping):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def _replace(text: str, *, escape: bool) -> str:
    """``text`` with the environment values in it as ``${VAR}``; ``escape``: every other ``$`` as ``$$``."""
    if text in _values:
        return _values[text]
    esc = (lambda t: t.replace("$", "$$")) if escape else (lambda t: t)
    with _lock:
        inside = sorted((v for v in _values if len(v) >= MIN_INSIDE), key=len, reverse=True)
    if not inside:
        return esc(text)
    out, last = [], 0
    for m in re.finditer("|".join(map(re.escape, inside)), text):
        out += [esc(text[last : m.start()]), _values[m.group(0)]]
        last = m.end()
    return "".join([*out, esc(text[last:])])
