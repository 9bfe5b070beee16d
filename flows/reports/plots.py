"""Run reports: plots (PNG bytes, matplotlib's Agg backend) and a self-contained HTML page (images inlined, its
markup from flows.reports.html).

Pure functions: the flow decides where the bytes go (the cache's `reports/<run>/` and Prefect artifacts). A figure is
memoised by what it draws: with ``FIGURE_MEMO`` set (the flow driver sets ``<cache>/reports/figures`` for a run), the
PNG of the same function, arguments and matplotlib version is read back instead of drawn again, so a cached night's
reports cost no matplotlib (its import alone is ~2 s).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import version

import numpy as np
import pyarrow as pa

from flows.reports.html import document, heading, image, paragraph, table
from storage.artifacts import FIGURE_MEMO, write_bytes
from storage.engines import scratch_duckdb
from storage.parts import Parts


def _plain(value: object) -> object:
    """A figure argument as JSON: tables as their rows, arrays and numpy scalars as lists and numbers."""
    if isinstance(value, pa.Table):
        return value.to_pylist()
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"cannot memoise a figure argument of type {type(value).__name__}")


def memoised(draw: Callable[..., bytes]) -> Callable[..., bytes]:
    """``draw`` (arguments -> PNG bytes), read from ``FIGURE_MEMO`` when it drew the same before."""

    @functools.wraps(draw)
    def figure(*args: object, **kwargs: object) -> bytes:
        memo = FIGURE_MEMO.get()
        if memo is None:
            return draw(*args, **kwargs)
        what = json.dumps([draw.__name__, version("matplotlib"), args, kwargs], default=_plain, sort_keys=True)
        path = memo / f"{hashlib.sha256(what.encode()).hexdigest()[:32]}.png"
        if path.is_file():
            return path.read_bytes()
        png = draw(*args, **kwargs)
        write_bytes(png, path)
        return png

    return figure


def histogram(parts: Parts, column: str, *, bins: int = 50) -> pa.Table:
    """Equal-width histogram of a numeric column over Parquet parts, computed in DuckDB (no column in memory)."""
    files = parts.sql()
    with scratch_duckdb(memory_limit="256MB", name="hist") as con:
        lo, hi, n = con.execute(f'SELECT min("{column}"), max("{column}"), count(*) FROM {files}').fetchall()[0]
        if not n:
            return pa.table(
                {"lo": pa.array([], pa.float64()), "hi": pa.array([], pa.float64()), "rows": pa.array([], pa.int64())}
            )
        width = (hi - lo) / bins or 1.0
        counts = dict(
            con.execute(
                f'SELECT least(floor(("{column}" - $lo) / $w)::BIGINT, $last) AS b, count(*) FROM {files} GROUP BY b',
                {"lo": lo, "w": width, "last": bins - 1},
            ).fetchall()
        )
    edges = lo + width * np.arange(bins + 1)
    return pa.table({"lo": edges[:-1], "hi": edges[1:], "rows": [int(counts.get(b, 0)) for b in range(bins)]})


@memoised
def uncertainty_figure(hist: pa.Table, *, u_max: float, beta: float, title: str) -> bytes:
    """Fig. 6.4 of the thesis: the distribution of monolingual U, U_max, and the sampling weight (α·u)^β
    normalised over the monolingual rows (p per row, right axis)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from tasks.self_training.uncertainty import sampling_weight

    lo, hi, rows = (hist[c].to_numpy() for c in ("lo", "hi", "rows"))
    mid = (lo + hi) / 2
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    ax.bar(lo, rows, width=hi - lo, align="edge", color="#8fb3d9", edgecolor="#4a7bb0", linewidth=0.4, label="sentences")
    ax.axvline(u_max, color="#c0392b", linestyle="--", label=f"U_max = {u_max:.3f}")
    ax.set_xlabel("sentence uncertainty U (Eq. 6.3)")
    ax.set_ylabel("monolingual sentences")
    weight = sampling_weight(mid, u_max=u_max, beta=beta)
    total = float((weight * rows).sum()) or 1.0
    ax2 = ax.twinx()
    ax2.plot(mid, weight / total, color="#27ae60", label=f"p per sentence (β = {beta:g})")
    ax2.set_ylabel("sampling probability p (Eq. 6.6)")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    ax.set_title(title, fontsize=10)
    return _png(fig)


def markdown_table(table: pa.Table, *, digits: int = 4) -> str:
    """A table as GitHub markdown (for Prefect's markdown artifacts and the summary)."""

    def cell(v: object) -> str:
        if v is None:
            return "–"
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(table.column_names) + " |\n|" + "---|" * table.num_columns + "\n"
    return head + "".join("| " + " | ".join(cell(v) for v in row.values()) + " |\n" for row in table.to_pylist())


def html_page(title: str, sections: Sequence[tuple[str, str | bytes | pa.Table]]) -> str:
    """One self-contained page: each section is (heading, text | PNG bytes | table), built by flows.reports.html."""
    body = [heading(1, title)]
    for head, content in sections:
        body.append(heading(2, head))
        if isinstance(content, bytes):
            body.append(image(content, head))
        elif isinstance(content, pa.Table):
            body.append(table(content.column_names, [list(r.values()) for r in content.to_pylist()]))
        else:
            body.append(paragraph(content))
    return document(title, body)


@memoised
def bar_figure(labels: Sequence[str], values: Sequence[float], *, xlabel: str, ylabel: str, title: str) -> bytes:
    """A bar chart as PNG bytes (e.g. Fig. 5.2: mean probability per probability bin)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    ax.bar([str(x) for x in labels], values, color="#8fb3d9", edgecolor="#4a7bb0", linewidth=0.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return _png(fig)


@memoised
def hbar_figure(labels: Sequence[str], values: Sequence[float], *, xlabel: str, title: str) -> bytes:
    """A horizontal bar chart as PNG bytes, the first label on top, each bar's value beside it (e.g. the rows each
    filter removed per dataset)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * max(len(labels), 1)), dpi=110)
    bars = ax.barh(list(labels), values, color="#8fb3d9", edgecolor="#4a7bb0", linewidth=0.4)
    ax.bar_label(bars, fmt="{:,.0f}", fontsize=8, padding=2)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    return _png(fig)


@memoised
def box_figure(groups: Mapping[str, Sequence[float]], *, ylabel: str, title: str) -> bytes:
    """One box per group (e.g. the similarity of each difficulty level), its count under the label."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    names = list(groups)
    if names:
        ax.boxplot([list(groups[n]) for n in names], showmeans=True)
        ax.set_xticks(range(1, len(names) + 1), [f"{n}\n(n = {len(groups[n])})" for n in names])
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return _png(fig)


@memoised
def line_figure(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    spans: Sequence[tuple[float, float, str]] = (),
) -> bytes:
    """Lines (x, y) per name; ``spans`` shade x-ranges with a label (e.g. the curriculum level of each step)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.2), dpi=110)
    for i, (lo, hi, label) in enumerate(spans):
        ax.axvspan(lo, hi, color="#eeeeee" if i % 2 else "#f8f8f8", linewidth=0)
        ax.text((lo + hi) / 2, 1.0, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=7)
    for name, (x, y) in series.items():
        ax.plot(list(x), list(y), label=name, linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10, pad=14)
    return _png(fig)


@memoised
def scatter_figure(
    panels: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[bool]]], *, xlabel: str, ylabel: str, title: str
) -> bytes:
    """One scatter panel per name of (x, y) points, the ``marked`` ones (e.g. selected) drawn over the rest."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names = list(panels) or ["(none)"]
    fig, axes = plt.subplots(1, len(names), figsize=(min(4.2 * len(names), 14), 4.2), dpi=110, squeeze=False)
    for ax, name in zip(axes[0], names):
        x, y, marked = (np.asarray(v) for v in panels.get(name, ([], [], [])))
        marked = marked.astype(bool)
        ax.scatter(x[~marked], y[~marked], s=6, color="#bbbbbb", label=f"not selected ({int((~marked).sum())})")
        ax.scatter(x[marked], y[marked], s=8, color="#d9534f", label=f"selected ({int(marked.sum())})")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    return _png(fig)


def _png(fig) -> bytes:
    from matplotlib import pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
