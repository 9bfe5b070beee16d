"""The planted bad lines of the demo files: where they go and what each reason does to a good line.

About 1 in 2,000 lines of a written file is bad, at least one of each reason from 500 lines on; the
`ingest` stage must reject exactly these, with these reasons.
"""

from __future__ import annotations

import json

import numpy as np

from conf.schema import IngestConf
from demo.draws import BAD_STREAM, STREAMS

MAX_LINE_CHARS = IngestConf().max_line_chars  # a planted too-long line exceeds this
BAD_REASONS = {
    "bitext": ["empty_src", "empty_tgt", "nul_byte_src", "invalid_utf8_tgt", "too_long_src"],
    "mono": ["empty", "nul_byte", "invalid_utf8", "too_long"],
    "labeled": ["wrong_columns", "empty_text", "nul_byte", "invalid_utf8", "too_long"],
    "slots": ["malformed_json", "length_mismatch", "nul_byte", "invalid_utf8", "too_long"],
}


def bad_lines(kind: str, n: int, *, seed: int = 0) -> dict[int, str]:
    """The `k = min(max(#reasons, n // 2000), n // 100)` planted bad lines of a file of `n` lines.

    One line per stratum of n/k lines, at a seeded offset within it; the reasons take turns.

    Args:
        kind: A key of `BAD_REASONS`: "bitext", "mono", "labeled" or "slots".
        n: The file's line count.
        seed: The corpus seed.

    Returns:
        {1-based line: reason}, empty below 100 lines.
    """
    reasons = BAD_REASONS[kind]
    k = min(max(len(reasons), n // 2000), n // 100)
    if k == 0:
        return {}
    offset = np.random.default_rng([seed, BAD_STREAM, STREAMS["train" if kind == "bitext" else kind]]).random(k)
    lines = (np.arange(k) * n) // k + (offset * (n // k)).astype(int) + 1
    return {int(line): reasons[i % len(reasons)] for i, line in enumerate(lines)}


def corrupt(line: str, reason: str) -> str:
    """The planted bad version of a good line (surrogate escapes become raw invalid bytes on write)."""
    mid = len(line) // 2
    if reason.startswith("empty"):
        return line.split("\t")[0] + "\t" if reason == "empty_text" else ""
    if reason.startswith("nul_byte"):
        return line[:mid] + "\x00" + line[mid:]
    if reason.startswith("invalid_utf8"):
        return line[:mid] + "\udcff\udcfe" + line[mid:]
    if reason == "wrong_columns":
        return line.replace(" ", "\t", 1)
    if reason == "malformed_json":
        return line[:-1]
    if reason == "length_mismatch":
        row = json.loads(line)
        return json.dumps({"tokens": row["tokens"], "tags": row["tags"][:-1]}, ensure_ascii=False)
    if reason.startswith("too_long"):
        row = json.loads(line) if line.startswith("{") else None
        label, tab, text = line.rpartition("\t")
        reps = 1
        while len(line) <= MAX_LINE_CHARS:
            reps *= 2
            line = (
                label + tab + " ".join([text] * reps)
                if row is None
                else json.dumps({"tokens": row["tokens"] * reps, "tags": row["tags"] * reps}, ensure_ascii=False)
            )
        return line
    raise AssertionError(reason)
