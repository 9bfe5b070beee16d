"""The read-only guard of a user's SQL (`augdag sql`, the shell, `export --where`): only queries get through.

``check_read_only(sql)`` reads the text with DuckDB's own parser, never a prefix: ``extract_statements``
gives each statement's type, ``json_serialize_sql`` the tree of a query, ``tokenize`` the words of an
EXPLAIN. A statement passes when it is a query (SELECT, FROM-first, VALUES, WITH, DESCRIBE, SHOW,
SUMMARIZE) or an EXPLAIN [ANALYZE] of one, and its tree holds only query nodes at every level: a
``COPY``, ``INSERT``, ``UPDATE`` or ``DELETE`` inside a CTE or a subquery is refused, as is a call of a
table function that writes, changes settings or runs SQL from a string (``denied_functions``). Empty
SQL (whitespace, ``;``, comments) is "no statement". ``check_condition(view, where)`` takes the text of
``export --where``: one boolean expression, nothing after it. ``query_error`` words a DuckDB error in a
user's query as one line (an unknown column names the view's columns).

Hand-written: DuckDB has no check of its own that a statement only reads (its ``read_only`` connection
still writes files with ``COPY``). The catalog connection stays sandboxed as well (storage/catalog.py).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from conf.errors import CatalogError

# offline: never fetch an extension (as storage/catalog.py)
_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
QUERY_NODES = {"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"}
# table functions that only read (files under the cache, the catalog's own metadata, generated rows)
READING_FUNCTIONS = {
    "read_parquet",
    "parquet_scan",
    "read_csv",
    "read_csv_auto",
    "read_json",
    "read_json_auto",
    "read_json_objects",
    "read_json_objects_auto",
    "read_ndjson",
    "read_ndjson_auto",
    "read_ndjson_objects",
    "read_text",
    "read_blob",
    "parquet_metadata",
    "parquet_file_metadata",
    "parquet_full_metadata",
    "parquet_kv_metadata",
    "parquet_schema",
    "parquet_bloom_probe",
    "sniff_csv",
    "glob",
    "range",
    "generate_series",
    "unnest",
    "repeat",
    "repeat_row",
    "json_each",
    "json_tree",
    "histogram",
    "histogram_values",
    "summary",
    "icu_calendar_names",
    "pg_timezone_names",
    "test_all_types",
    "test_vector_types",
    "which_secret",
}
LISTING_PREFIXES = ("duckdb_", "pragma_")  # the catalog's metadata: duckdb_tables(), pragma_table_info(), ...
_QUERY_WORDS = {"SELECT", "WITH", "FROM", "VALUES", "(", "TABLE"}  # a statement of another type that starts so
_HINT = "Hint: use SELECT over the views; `augdag export VIEW` writes files."
_LOCATION = re.compile(r"^query_location")
_SET_HINT = re.compile(r'Use "SET max_expression_depth TO x" to increase the maximum expression depth\.?')
_DEPTH_HINT = "Hint: nest fewer expressions (a long OR chain as `x IN (...)`, deep parentheses as a CTE)."


@functools.cache
def denied_functions() -> frozenset[str]:
    """Every table function DuckDB knows but ``READING_FUNCTIONS`` (checkpoint, enable_logging, query, ...), and
    the scalar functions that write (a sequence's ``setval``/``nextval``, ``write_log``)."""
    with duckdb.connect(config=_CONFIG) as con:
        tables = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro')"
            ).fetchall()
        }
    reading = {name for name in tables if name in READING_FUNCTIONS or name.startswith(LISTING_PREFIXES)}
    return frozenset(tables - reading | {"setval", "nextval", "write_log"})


def _one_line(e: Exception) -> str:
    """A DuckDB error without its ``LINE 1: ...`` excerpt and caret, on one line, and without a hint to run a
    statement the sandbox refuses (``SET max_expression_depth``)."""
    lines = str(e).splitlines()
    kept = lines[: next((i for i, line in enumerate(lines) if re.match(r"LINE \d+:", line)), len(lines))]
    return _SET_HINT.sub(_DEPTH_HINT, " ".join(s.strip() for s in kept if s.strip()))


def _refuse(word: str, text: str) -> CatalogError:
    article = "an" if word[:1] in "AEIOU" and not word.startswith("US") else "a"
    return CatalogError(
        f"refused: `augdag sql` is read-only and this is {article} {word} statement: {' '.join(text.split())[:80]!r}. {_HINT}"
    )


def _words(sql: str) -> list[tuple[int, str]]:
    """The tokens of ``sql`` as (character offset, text), comments left out (DuckDB's offsets count UTF-8 bytes)."""
    raw = sql.encode("utf-8")
    tokens = duckdb.tokenize(sql)
    ends = [t[0] for t in tokens[1:]] + [len(raw)]
    return [
        (len(raw[:start].decode("utf-8")), raw[start:end].decode("utf-8").strip())
        for (start, kind), end in zip(tokens, ends)
        if kind != duckdb.token_type.comment
    ]


def _type(statement: Any) -> str:
    """DuckDB's type of a parsed statement; one the Python enum lacks (``UPDATE EXTENSIONS``) is ``OTHER``."""
    try:
        return statement.type.name
    except ValueError:
        return "OTHER"


def _what(statement: Any) -> str:
    """What a refused statement is, as written (INSTALL, CHECKPOINT, EXPLAIN COPY): DuckDB's statement types
    lump several together (INSTALL is a LOAD statement, CHECKPOINT a CALL)."""
    words = [w.upper() for _, w in _words(statement.query)]
    if not words:
        return _type(statement)
    if words[0] in _QUERY_WORDS:
        return "PIVOT" if _type(statement) == "MULTI" else _type(statement)
    if words[0] != "EXPLAIN":
        return re.sub(r"[^A-Z_].*", "", words[0]) or words[0]
    rest, depth = [], 0
    for w in words[1:]:  # past ANALYZE and an options list: the word of the statement explained
        depth += {"(": 1, ")": -1}.get(w, 0)
        if depth == 0 and w not in ("ANALYZE", ")"):
            rest.append(w)
    return f"EXPLAIN {rest[0]}" if rest else "EXPLAIN"


def _statements(con: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    try:
        return con.extract_statements(sql)
    except duckdb.Error as e:
        raise CatalogError(f"SQL does not parse: {_one_line(e)}") from None


def _tree(con: duckdb.DuckDBPyConnection, query: str) -> dict[str, Any] | None:
    """The parse tree of a query (None: DuckDB cannot serialise it, e.g. a PIVOT)."""
    found = json.loads(con.execute("SELECT json_serialize_sql($q)", {"q": query}).fetchone()[0])
    return None if found.get("error") else found


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from _nodes(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _nodes(value)


def tables_read(sql: str) -> set[str]:
    """The tables and views a query reads, from DuckDB's parse (nothing bound, no file opened): every base table
    of its tree but the names of its own CTEs; an empty set when it does not parse (the query's run says why)."""
    with duckdb.connect(config=_CONFIG) as con:
        tree = _tree(con, sql)
    if tree is None:
        return set()
    nodes = list(_nodes(tree))
    ctes = {m["key"] for n in nodes for m in (n.get("cte_map") or {}).get("map", []) if isinstance(m, dict)}
    return {n["table_name"] for n in nodes if n.get("type") == "BASE_TABLE" and "table_name" in n} - ctes


def _check_tree(tree: dict[str, Any], text: str) -> None:
    """Every query node a SELECT (or a union, a CTE), no statement info (COPY), no denied function."""
    for node in _nodes(tree):
        kind = node.get("type")
        if isinstance(kind, str) and kind.endswith("_NODE") and kind not in QUERY_NODES:
            raise _refuse(kind.removesuffix("_NODE").removesuffix("_QUERY"), text)
        if "info_type" in node:
            raise _refuse(str(node["info_type"]).removesuffix("_INFO"), text)
        name = node.get("function_name")
        if isinstance(name, str) and name.lower() in denied_functions():
            raise CatalogError(
                f"refused: `augdag sql` is read-only and {name}() may write, change a setting or run "
                f"other SQL: {' '.join(text.split())[:80]!r}. {_HINT}"
            )


def _check_query(con: duckdb.DuckDBPyConnection, query: str) -> None:
    tree = _tree(con, query)
    if tree is None:
        raise CatalogError(
            f"refused: `augdag sql` runs only queries it can check, and DuckDB's parser cannot show "
            f"this one's parts (a PIVOT?): {' '.join(query.split())[:80]!r}. Hint: write it "
            "with GROUP BY and FILTER"
        )
    _check_tree(tree, query)


def _explained(con: duckdb.DuckDBPyConnection, statement: str) -> str | None:
    """The query an ``EXPLAIN [ANALYZE] [(options)] <query>`` explains; None when it explains no query."""
    words = _words(statement)
    at = 1  # past EXPLAIN
    if at < len(words) and words[at][1].upper() == "ANALYZE":
        at += 1
    starts = [at]
    if at < len(words) and words[at][1] == "(":  # an options list, or a query in parentheses
        depth = 0
        for i in range(at, len(words)):
            depth += {"(": 1, ")": -1}.get(words[i][1], 0)
            if depth == 0:
                starts.append(i + 1)
                break
    for start in starts:
        rest = statement[words[start][0] :] if start < len(words) else ""
        try:
            inner = con.extract_statements(rest)
        except duckdb.Error:
            continue
        if len(inner) == 1 and _type(inner[0]) == "SELECT":
            return inner[0].query
    return None


def check_read_only(sql: str) -> list[str]:
    """Refuse every statement that is not a query, and a query holding a write at any level; returns the text of
    each statement (DuckDB's split: ``$$;$$``, ``E'\\';'`` and comments stay whole), to run one by one.

    Raises:
        CatalogError: text that is not valid UTF-8; no statement; a statement that does not parse; DDL, DML,
            ATTACH, COPY (also in a CTE, a subquery or under EXPLAIN ANALYZE), INSTALL/LOAD, SET, PRAGMA, CALL,
            EXPORT/IMPORT, CHECKPOINT, VACUUM; a table function that writes or runs SQL (``denied_functions``).
    """
    check_text(sql)
    with duckdb.connect(config=_CONFIG) as con:
        statements = _statements(con, sql)
        if not statements:
            raise CatalogError(
                'no statement: the SQL is empty (only spaces, `;` or comments). Hint: augdag sql "SELECT count(*) FROM bitext"'
            )
        for st in statements:
            query = st.query if _type(st) == "SELECT" else _explained(con, st.query) if _type(st) == "EXPLAIN" else None
            if query is None:
                raise _refuse(_what(st), st.query)
            _check_query(con, query)
    return [st.query for st in statements]


def check_text(sql: str, place: str = "the SQL") -> None:
    """Refuse text that is not valid UTF-8 (bytes a terminal or a file passed through, kept as surrogates by
    Python's ``surrogateescape``), naming the first bad byte: DuckDB's bindings fail on it with a multi-line message.

    Raises:
        CatalogError: the first byte that is not UTF-8, with its character position.
    """
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:
        raw = sql[e.start].encode("utf-8", "surrogateescape") if "\udc80" <= sql[e.start] <= "\udcff" else b""
        byte = f"byte 0x{raw[0]:02x}" if raw else f"character {sql[e.start]!r}"
        raise CatalogError(
            f"{place} is not valid UTF-8: {byte} at character {e.start + 1}. Hint: save the query as UTF-8"
        ) from None


def split_statements(text: str) -> tuple[list[str], str]:
    """The complete statements of ``text``, each ended by a `;` that DuckDB's tokenizer reads as one (not in a
    quote, a ``$$`` or ``E'\\''`` string, or a comment), without that `;`; a part of only comments is none. And the
    unfinished rest: "" when it holds only comments, else as written (an open quote or comment included)."""
    safe = re.sub("[\udc80-\udcff]", "?", text)  # a byte that is not UTF-8: one byte still (check_text names it)
    raw, tokens = text.encode("utf-8", "surrogateescape"), duckdb.tokenize(safe)
    ends = [t[0] for t in tokens[1:]] + [len(raw)]
    done, start, code, open_comment = [], 0, False, False
    for (at, kind), end in zip(tokens, ends):
        word = raw[at:end].strip()
        if kind == duckdb.token_type.operator and word.startswith(b";"):
            if code:
                done.append(raw[start:at].decode("utf-8", "surrogateescape").strip())
            start, code, open_comment = at + 1, False, False
        elif kind == duckdb.token_type.comment:
            open_comment = word.startswith(b"/*") and not (len(word) >= 4 and word.endswith(b"*/"))
        else:
            code = True
    rest = raw[start:].decode("utf-8", "surrogateescape")
    return done, rest if code or open_comment else ""


def _shape(tree: Any) -> Any:
    """A parse tree without its source positions (two texts of one shape compare equal)."""
    if isinstance(tree, dict):
        return {k: _shape(v) for k, v in tree.items() if not _LOCATION.match(k)}
    if isinstance(tree, list):
        return [_shape(v) for v in tree]
    return tree


def check_condition(view: str, where: str) -> str:
    """``SELECT * FROM "view" WHERE <where>``, once ``where`` is one boolean expression and nothing else (no
    `;`, no second statement, no ORDER BY / LIMIT / UNION after it) and the query passes ``check_read_only``.

    Raises:
        CatalogError: the condition is empty, does not parse, or is more than one expression.
    """
    sql = f'SELECT * FROM "{view}" WHERE {where}'
    if not where.strip():
        raise CatalogError("--where is empty: expected a condition such as \"source = 'wmt22'\"")
    with duckdb.connect(config=_CONFIG) as con:
        try:
            statements = con.extract_statements(sql)
        except duckdb.Error as e:
            raise CatalogError(f"--where {where!r} does not parse as a condition: {_one_line(e)}") from None
        tree = _tree(con, statements[0].query) if len(statements) == 1 else None
        bare = _tree(con, f'SELECT * FROM "{view}"')
    node = tree["statements"][0]["node"] if tree and len(tree["statements"]) == 1 else None
    if (
        node is None
        or node.get("where_clause") is None
        or _shape({**node, "where_clause": None}) != _shape(bare["statements"][0]["node"])
    ):
        raise CatalogError(
            f"--where takes one condition on the rows of {view}, found more: {where!r}. "
            "Hint: --where \"source = 'wmt22' AND length(src) < 200\" (no `;`, ORDER BY or LIMIT)"
        )
    check_read_only(sql)
    return sql


def query_error(e: duckdb.Error, *, view: str | None = None, columns: Sequence[str] = (), place: str = "query") -> CatalogError:
    """A DuckDB error in a user's query as one line (``query failed: ...``). ``place`` names where the SQL came from
    (``--where``); with ``view`` and its ``columns``, an unknown column is named with the columns it may have meant."""
    message = _one_line(e)
    missing = re.search(r'Referenced column "?([^"\s]+)"? not found', message)
    if missing and view:
        return CatalogError(f"{place}: no column {missing[1]!r} in view {view}; its columns: {', '.join(columns)}")
    return CatalogError(f"{place} failed: {message}")


_MISSING_PATH = re.compile(r"Table with name (\S*[/\\.]\S*) does not exist")
_READ_ONLY_STORE = re.compile(r"PermissionError: (\S+: augdag's object store is read-only to SQL)")


def sandbox_error(e: duckdb.Error, root: Path, stores: Sequence[str] = ()) -> CatalogError:
    """A DuckDB error of a user's sandboxed query as one line: a file or URL outside the cache (and its object-store
    prefixes ``stores``) refused, a path used as a table name (``FROM '/a/path'``), else the query's own error."""
    if isinstance(e, duckdb.PermissionException):
        return CatalogError(outside_cache(root, e, stores))
    if isinstance(e, duckdb.CatalogException) and (m := _MISSING_PATH.search(str(e))):
        return CatalogError(outside_cache(root, f'Cannot scan the file "{m[1]}" as a table', stores))
    if m := _READ_ONLY_STORE.search(str(e)):  # a write that reached the object store's filesystem (storage/objects/)
        return CatalogError(f"refused: {m[1]}")
    return query_error(e)


def outside_cache(root: Path, error: Exception | str, stores: Sequence[str] = ()) -> str:
    """The refusal of a sandboxed query that tried to open a file or URL outside the cache ``root`` (and the
    object-store prefixes ``stores`` its artifacts lie under)."""
    detail = str(error).removeprefix("Permission Error: ").split(" - ")[0]
    where = f"the cache {root}" + "".join(f" and {s}" for s in stores)
    return (
        f"refused: `augdag sql` reads only the catalog and files under {where}: {detail}. "
        "Hint: query the views (`augdag views` lists them); bring other files in with `augdag run ingest`."
    )
