"""Helpers of the robustness tests: bitext tables with md5 uids (and an alignment) from hand-written pairs."""

from __future__ import annotations

import math

import pyarrow as pa

from storage.schemas import BITEXT, with_uid


def make_pairs(src: list[str], tgt: list[str], links: list[str | None] | None = None, *, source: str = "t") -> pa.Table:
    n = len(src)
    table = with_uid(
        pa.table(
            {"uid": pa.nulls(n, pa.string()), "src": src, "tgt": tgt, "source": [source] * n, "line": range(1, n + 1)},
            schema=BITEXT,
        ),
        "bitext",
    )
    return table if links is None else table.append_column("links", pa.array(links, pa.string()))


def diagonal(src: list[str], tgt: list[str]) -> list[str]:
    """i-i links up to the shorter side: the synthetic alignment of Multi30k-like rows."""
    return [" ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split())))) for s, t in zip(src, tgt, strict=True)]


def many(n: int, *, links: bool = False, source: str = "many") -> pa.Table:
    """``n`` distinct rows of short English/German-like pairs (every row has a lower-case letter and end mark)."""
    src = [f"a small dog number {i} runs in the park ." for i in range(n)]
    tgt = [f"ein kleiner Hund Nummer {i} rennt im Park ." for i in range(n)]
    return make_pairs(src, tgt, diagonal(src, tgt) if links else None, source=source)


def within_3_se(count: int, n: int, p: float) -> bool:
    """``count`` of ``n`` Bernoulli(p) trials within 3 standard errors of p."""
    return abs(count / n - p) <= 3 * math.sqrt(p * (1 - p) / n)


def same_rate_3_se(a: int, n_a: int, b: int, n_b: int) -> bool:
    """Two observed shares within 3 standard errors of their difference."""
    pa_, pb = a / n_a, b / n_b
    return abs(pa_ - pb) <= 3 * math.sqrt(pa_ * (1 - pa_) / n_a + pb * (1 - pb) / n_b + 1e-12)
