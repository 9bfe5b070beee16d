"""What every modifier reads and writes: the bitext columns, word alignments, and the rows it emits.

**Input**: a bitext table with ``uid``, ``src``, ``tgt`` and, if the table has them, ``source``, ``line`` (carried to
the output) and ``links``: the word alignment as Pharaoh text, ``"0-0 1-2 3-3"`` (source position - target position,
0-based whitespace tokens), the aligner artifact's ``links`` column (tasks/self_training/alignment.py, symmetrised
with grow-diag-final-and) and OpusTrainer's third column alike. A null ``links`` is a row without alignment. Links
are read as a set: sorted by (source, target) position, duplicates dropped; a row whose links are not Pharaoh text or
point past its tokens is an ``InputError`` naming it (a stale or foreign alignment, never a silent mis-tag).

**Output** (``ROBUST_BITEXT``): only the rows a modifier changed, each with ``parent_uid`` (the input row),
``parents`` (every input row it was made from, in order: one, or a merge's two or more), ``modifier`` (OpusTrainer's
name), ``params`` (JSON of its parameters, in OpusTrainer's order) and ``links`` where the modifier keeps the
alignment (updated as the modifier moves words). ``uid`` = md5(modifier ␟ params ␟ parents ␟ src ␟ tgt), 32 hex
digits like every other uid: the same pair made from the same rows by the same modifier is the same row.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError

ROBUST_BITEXT = pa.schema(
    [
        pa.field("uid", pa.string(), metadata={"doc": "md5(modifier, params, parents, src, tgt)"}),
        pa.field("parent_uid", pa.string(), metadata={"doc": "the input row (a merge: its first row)"}),
        pa.field("parents", pa.list_(pa.string()), metadata={"doc": "every input row, in order"}),
        pa.field("source", pa.string(), metadata={"doc": "the parent's dataset"}),
        pa.field("line", pa.int64(), metadata={"doc": "the parent's 1-based line"}),
        pa.field("src", pa.string()),
        pa.field("tgt", pa.string()),
        pa.field("links", pa.string(), metadata={"doc": "Pharaoh word alignment after the change; null: none"}),
        pa.field("modifier", pa.string(), metadata={"doc": "OpusTrainer's name, e.g. UpperCase"}),
        pa.field("params", pa.string(), metadata={"doc": "JSON of the modifier's parameters"}),
    ]
)
Pairs = list[tuple[int, int]]


def require_bitext(rows: pa.Table, *, modifier: str, links: bool = False) -> None:
    """InputError unless ``rows`` has uid, src, tgt (and links when the modifier needs an alignment)."""
    needed = ["uid", "src", "tgt"] + (["links"] if links else [])
    missing = [c for c in needed if c not in rows.column_names]
    if missing:
        hint = " Hint: join the aligner's artifact on uid (its `links` column)." if "links" in missing else ""
        raise InputError(f"{modifier}: expected columns {', '.join(needed)}, missing {', '.join(missing)}.{hint}")


def column(rows: pa.Table, name: str) -> pa.Array:
    """A column as one array (no copy when it has one chunk)."""
    chunked = rows[name]
    return chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()


def tokens(text: pa.Array) -> pa.ListArray:
    """Whitespace tokens per row, as ``str.split()`` makes them (Arrow's Unicode whitespace is Python's)."""
    split = pc.utf8_split_whitespace(pc.utf8_trim_whitespace(text))
    return pc.if_else(pc.equal(pc.utf8_length(text.fill_null("")), 0), pa.scalar([], split.type), split)


def params_json(params: Mapping[str, Any]) -> str:
    """The parameters as JSON, in the order given (OpusTrainer's: the probability first, then its keys)."""
    return json.dumps(dict(params), ensure_ascii=False)


def row_uid(modifier: str, params: str, parents: Sequence[str], src: str, tgt: str) -> str:
    """The uid of one output row (``row_uids`` computes the same for a column)."""
    text = "\x1f".join([modifier, params, "\x1e".join(parents), src, tgt])
    return hashlib.md5(text.encode()).hexdigest()


def parse_pairs(text: str | None) -> Pairs | None:
    """``"0-0 2-1"`` as sorted unique (source, target) pairs; None for a null alignment."""
    if text is None:
        return None
    try:
        return sorted({(int(a), int(b)) for a, b in (p.split("-") for p in text.split())})
    except ValueError:
        raise InputError(f"links: expected Pharaoh pairs such as '0-0 1-2', found {text!r}") from None


def parse_pairs_or_none(text: str | None) -> Pairs | None:
    """``parse_pairs``, or None where the text is not Pharaoh pairs of non-negative integers."""
    try:
        pairs = parse_pairs(text)
    except InputError:
        return None
    return pairs if pairs is None or all(a >= 0 and b >= 0 for a, b in pairs) else None


def format_pairs(pairs: Sequence[tuple[int, int]]) -> str:
    """Pairs as Pharaoh text, sorted, without duplicates."""
    return " ".join(f"{s}-{t}" for s, t in sorted(set(pairs)))


_local = threading.local()


def _connection() -> duckdb.DuckDBPyConnection:
    """One private in-memory DuckDB connection per thread (and process)."""
    if getattr(_local, "pid", None) != os.getpid():
        _local.con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        _local.pid = os.getpid()
    return _local.con


def row_uids(modifier: str, params: str, parents: pa.ListArray, src: pa.Array, tgt: pa.Array) -> pa.Array:
    """md5(modifier ␟ params ␟ parents joined by ␞ ␟ src ␟ tgt) of every row, in DuckDB."""
    con = _connection()
    con.register("robust_uid_input", pa.table({"parents": pc.binary_join(parents, "\x1e"), "src": src, "tgt": tgt}))
    try:
        sql = "SELECT md5(concat_ws(chr(31), $modifier, $params, parents, src, tgt)) AS uid FROM robust_uid_input"
        return con.sql(sql, params={"modifier": modifier, "params": params}).to_arrow_table()["uid"].combine_chunks()
    finally:
        con.unregister("robust_uid_input")


def taken(rows: pa.Table, name: str, index: pa.Array) -> pa.Array:
    """``rows[name]`` at ``index``, one array."""
    return rows[name].take(index).combine_chunks()


def emit(
    rows: pa.Table,
    index: np.ndarray,
    *,
    src: pa.Array | Sequence[str],
    tgt: pa.Array | Sequence[str],
    links: pa.Array | Sequence[str | None] | None = None,
    modifier: str,
    params: Mapping[str, Any],
    parents: pa.ListArray | None = None,
    changed_only: bool = True,
) -> pa.Table:
    """The output rows made from input rows ``index`` (one each), with their new src, tgt and links (None: the
    input's, where it has them) and ``parents`` (None: the row itself). Unless ``changed_only`` is off (new pairs:
    noise, merges), a row whose src, tgt and links equal its parent's is left out."""
    index = np.asarray(index, dtype=np.int64)
    take = pa.array(index, pa.int64())
    src = (src if isinstance(src, pa.Array) else pa.array(src, pa.string())).cast(pa.string())
    tgt = (tgt if isinstance(tgt, pa.Array) else pa.array(tgt, pa.string())).cast(pa.string())
    old_links = (
        taken(rows, "links", take).cast(pa.string()) if "links" in rows.column_names else pa.nulls(len(index), pa.string())
    )
    if links is None:
        links = old_links
    links = (links if isinstance(links, pa.Array) else pa.array(links, pa.string())).cast(pa.string())
    uids = taken(rows, "uid", take)
    if parents is None:
        parents = pa.ListArray.from_arrays(pa.array(np.arange(len(index) + 1, dtype=np.int32)), uids)
    if changed_only and len(index):
        same_links = pc.or_(pc.fill_null(pc.equal(links, old_links), False), pc.and_(pc.is_null(links), pc.is_null(old_links)))
        same = pc.and_(pc.and_(pc.equal(src, taken(rows, "src", take)), pc.equal(tgt, taken(rows, "tgt", take))), same_links)
        keep = pc.invert(same)
        index, src, tgt, links = (
            index[keep.to_numpy(zero_copy_only=False)],
            src.filter(keep),
            tgt.filter(keep),
            links.filter(keep),
        )
        uids, parents, take = uids.filter(keep), parents.filter(keep), pa.array(index, pa.int64())
    text, n = params_json(params), len(index)
    where = {
        name: (taken(rows, name, take) if name in rows.column_names else pa.nulls(n, ROBUST_BITEXT.field(name).type))
        for name in ("source", "line")
    }
    return pa.table(
        {
            "uid": row_uids(modifier, text, parents, src, tgt),
            "parent_uid": uids.cast(pa.string()),
            "parents": parents.cast(pa.list_(pa.string())),
            "source": where["source"].cast(pa.string()),
            "line": where["line"].cast(pa.int64()),
            "src": src,
            "tgt": tgt,
            "links": links,
            "modifier": pa.array([modifier] * n, pa.string()),
            "params": pa.array([text] * n, pa.string()),
        },
        schema=ROBUST_BITEXT,
    )


@dataclass(frozen=True)
class FlatLinks:
    """Every row's links end to end: ``row``, ``src``, ``tgt`` (int64, sorted by row, src, tgt, no duplicates) and
    ``has`` (per row: not null)."""

    row: np.ndarray
    src: np.ndarray
    tgt: np.ndarray
    has: np.ndarray

    @classmethod
    def of(cls, links: pa.Array, uids: pa.Array) -> FlatLinks:
        """Parse a Pharaoh column at once with Arrow kernels (split on whitespace, split on "-", cast to integers);
        a row that is not ``a-b`` pairs separated by whitespace is an InputError naming its uid."""
        has = pc.is_valid(links).to_numpy(zero_copy_only=False)
        pairs = tokens(links.fill_null(""))
        halves = pc.split_pattern(pairs.flatten(), "-")
        row = np.repeat(np.arange(len(links)), pc.list_value_length(pairs).to_numpy(zero_copy_only=False))
        wrong = pc.not_equal(pc.list_value_length(halves), 2).to_numpy(zero_copy_only=False)
        try:
            numbers = pc.cast(halves.flatten(), pa.int64()).to_numpy() if not wrong.any() else None
        except pa.ArrowInvalid:
            numbers = None
        if numbers is None or (numbers < 0).any():
            bad = [i for i in np.unique(row).tolist() if parse_pairs_or_none(links[i].as_py()) is None]
            i = bad[0] if bad else int(row[0])
            raise InputError(
                f"links: row {uids[i].as_py()}: expected Pharaoh pairs such as '0-0 1-2', found {links[i].as_py()!r}"
            )
        src, tgt = numbers[0::2], numbers[1::2]
        order = np.lexsort((tgt, src, row))
        row, src, tgt = row[order], src[order], tgt[order]
        fresh = np.ones(len(src), bool)
        fresh[1:] = (row[1:] != row[:-1]) | (src[1:] != src[:-1]) | (tgt[1:] != tgt[:-1])
        return cls(row[fresh], src[fresh], tgt[fresh], has)

    def offsets(self, n: int) -> np.ndarray:
        """CSR offsets of the rows' links (n + 1)."""
        out = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(self.row, minlength=n), out=out[1:])
        return out


def pharaoh(row: np.ndarray, src: np.ndarray, tgt: np.ndarray, has: np.ndarray) -> pa.Array:
    """Pharaoh text per row from flat links (``row`` sorted; each row's links in the order given); null where
    ``has`` is false."""
    n = len(has)
    pair = pc.binary_join_element_wise(pa.array(src).cast(pa.string()), pa.array(tgt).cast(pa.string()), "-")
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(row, minlength=n), out=offsets[1:])
    text = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pair), " ")
    return pc.if_else(pa.array(has, pa.bool_()), text, pa.scalar(None, pa.string()))
