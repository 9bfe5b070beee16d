"""`augdag sql` and its shell split statements with DuckDB's own tokenizer and print every result; a piped script
with a failed statement exits 1; a query may start with a `--` comment; no hint to run a refused statement; a
query that is not UTF-8 is one line (issue 48, defects 7 and 9). Through the CLI, in this process (typer's runner: a
subprocess costs ~2 s); tests/e2e/test_stoppable_queries.py pipes the same script into a real `augdag sql --shell`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage.catalog import Catalog


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """An empty catalog (no run needed: the queries read no view)."""
    cache = tmp_path_factory.mktemp("statements") / "cache"
    with Catalog(cache).write():
        pass
    return cache


def invoke(cache: Path, *args: str, stdin: str | bytes = "") -> tuple[int, str, str]:
    """`augdag sql ARGS` in this process (a subprocess costs ~2 s here): its exit code, stdout and stderr."""
    done = CliRunner().invoke(app, ["sql", *args, "--cache", str(cache)], input=stdin)
    return done.exit_code, done.stdout, done.stderr


SCRIPT = (
    b"SELECT $$a;b$$ AS d;\n"  # a dollar-quoted string holding `;`
    b"SELECT E'x\\'y;z' AS e;\n"  # an escape string holding \' and `;`
    b"SELECT 1 AS one; SELECT 2 AS two;\n"  # two on one line: both results
    b"-- a comment first\nSELECT\n  3 AS three;\n"  # a comment, then a statement over two lines
    b"SELEC 4;\n"  # does not parse
    b"SELECT '\xff' AS bad;\n"  # not UTF-8
    b"/* a ; in a comment */ SELECT 5 AS five;\n"
)
RESULTS = ['{"d": "a;b"}', '{"e": "x\'y;z"}', '{"one": 1}', '{"two": 2}', '{"three": 3}', '{"five": 5}']
ERRORS = [
    'error: line 7: SQL does not parse: Parser Error: syntax error at or near "SELEC"',  # the line of its statement
    "error: line 8: the SQL is not valid UTF-8: byte 0xff at character 9. Hint: save the query as UTF-8",
    "error: 2 statement(s) failed",
]


def test_shell_splits_with_duckdbs_tokenizer_prints_every_result_and_exits_1_when_a_statement_failed(cache):
    code, stdout, stderr = invoke(cache, "--shell", "-f", "json", stdin=SCRIPT)
    assert stdout.splitlines() == RESULTS and stderr.splitlines() == ERRORS and code == 1


def test_shell_script_that_all_ran_exits_0(cache):
    script = "SELECT 1 AS a;\n-- only a comment; still one\n.quit\n"
    assert invoke(cache, "--shell", "-f", "json", stdin=script) == (0, '{"a": 1}\n', "")


def test_one_shot_query_may_start_with_a_comment_and_prints_every_result(cache):
    query = "-- the first two\nSELECT 1 AS a; SELECT 2 AS b"
    assert invoke(cache, "-f", "json", query) == (0, '{"a": 1}\n{"b": 2}\n', "")


@pytest.mark.parametrize(
    "args, says",
    ids=["not_utf8", "max_depth", "mistyped_option", "output_of_two"],
    argvalues=[
        (  # the bytes of the argument as a terminal passes them: Python keeps them as surrogates
            ["SELECT '\udcff\udcfe' AS x"],
            "error: the SQL is not valid UTF-8: byte 0xff at character 9. Hint: save the query as UTF-8",
        ),
        (
            ["SELECT " + "+".join(["1"] * 1500)],
            "error: SQL does not parse: Parser Error: Max expression depth limit of 1000 exceeded. Hint: nest fewer "
            "expressions (a long OR chain as `x IN (...)`, deep parentheses as a CTE).",
        ),
        (["--fromat"], "error: no such option: --fromat (see `augdag sql --help`)"),
        (["SELECT 1; SELECT 2", "-o", "two.csv"], "error: --output writes one result, and QUERY holds 2 statements"),
    ],
)
def test_one_shot_mistakes_are_one_line_and_exit_2(cache, args, says):
    assert invoke(cache, *args) == (2, "", says + "\n")
    assert not (cache.parent / "two.csv").exists() and not os.path.exists("two.csv")


def test_a_query_explained_after_non_ascii_text_is_not_refused(cache):
    """DuckDB's tokenizer counts UTF-8 bytes: read as characters, the guard cut `SELECT` to `ECT 'Ü'` and refused."""
    code, stdout, stderr = invoke(cache, "-f", "json", "EXPLAIN /* é */ SELECT 'ü' AS x")
    assert (code, stderr, [json.loads(line)["explain_key"] for line in stdout.splitlines()]) == (0, "", ["physical_plan"])
