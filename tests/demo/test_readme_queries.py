"""What the user reads returns rows (issue 47, defect 6): every query of README.md and docs/ (most are in the SQL
cookbook, docs/sql.md: `augdag sql "..."`, the shell's `augdag>` statements, fenced ```sql blocks) and every query
`augdag demo` prints under "Try:" is run through `augdag sql` against the session's tiny demo (demo/tiny.py) and
selects at least one row.

A query that cannot select a row on the tiny demo goes in ``NO_ROWS`` with the reason; none does today. A student
evaluated through its CTranslate2 conversion is found by the README's "BLEU of every student" query: `evaluations`
names the model fairseq trained (`models.name` student), the conversion is in ``meta.inference``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from demo.tiny import TINY_SETS
from flows.cli import app
from tests.conftest import REPO, harness_url, subprocess_env

runner = CliRunner()
# `augdag sql "…"` (an optional --cache DIR between, as the demo prints it): the query in shell double quotes
SQL_CALL = re.compile(r'augdag sql(?: --cache \S+)? "((?:[^"\\]|\\.)*)"', re.S)
SHELL_LINE = re.compile(r"^(?:augdag>|\s*\.\.\.>) ?(.*)$")  # `augdag sql --shell`'s prompts in a console block
SQL_FENCE = re.compile(r"^```sql\n(.*?)^```", re.S | re.M)
# query (as extracted) -> why it cannot select a row on the tiny demo
NO_ROWS: dict[str, str] = {}


def shell_unquote(quoted: str) -> str:
    """The text of a double-quoted shell word: ``\\$``, ``\\"``, ``\\\\`` and ``\\``` lose their backslash."""
    return re.sub(r'\\([$"\\`])', r"\1", quoted)


def queries_in(text: str) -> list[tuple[int, str]]:
    """(1-based line, query) of every SQL query a reader of ``text`` (Markdown) is shown to run."""
    found = [(text.count("\n", 0, m.start()) + 1, shell_unquote(m.group(1))) for m in SQL_CALL.finditer(text)]
    found += [(text.count("\n", 0, m.start()) + 2, m.group(1).strip()) for m in SQL_FENCE.finditer(text)]
    statement, start = [], 0
    for i, line in enumerate(text.splitlines(), 1):
        if (m := SHELL_LINE.match(line)) and not m.group(1).startswith("."):  # .schema, .quit: not SQL
            start = start or i
            statement.append(m.group(1).strip())
            if statement[-1].endswith(";"):
                found.append((start, " ".join(statement)[:-1]))
                statement, start = [], 0
    return sorted(found)


def documented() -> list[tuple[str, str]]:
    """(file:line, query) of README.md and docs/*.md."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [(f"{f.relative_to(REPO)}:{line}", q) for f in files for line, q in queries_in(f.read_text())]


DOCUMENTED = documented()


def rows_of(cache: Path, query: str) -> list[dict]:
    result = runner.invoke(app, ["sql", query, "--format", "json", "--cache", str(cache)])
    assert result.exit_code == 0, f"{query}\n{result.output}"
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_queries_in_finds_calls_shell_statements_and_fences_with_their_lines():
    text = (
        'intro\naugdag sql "SELECT 1"  # one\n'
        '```console\n$ augdag sql --cache x "SELECT \\$.a,\n   \\"b\\" FROM t"\n'
        "augdag> SELECT level\n   ...> FROM curriculum;\naugdag> .schema t\n```\n"
        "```sql\nSELECT 2\n```\n"
    )
    assert queries_in(text) == [
        (2, "SELECT 1"),
        (4, 'SELECT $.a,\n   "b" FROM t'),
        (6, "SELECT level FROM curriculum"),
        (11, "SELECT 2"),
    ]


def test_the_cookbook_and_the_readme_show_their_queries():
    """The extraction sees the SQL cookbook's queries (docs/sql.md, where the README's moved in issue 50): its calls,
    its multi-line ones and its shell statement; and the README's own three."""
    cookbook = [q for where, q in DOCUMENTED if where.startswith("docs/sql.md:")]
    text = (REPO / "docs" / "sql.md").read_text()
    assert len(cookbook) == len(re.findall(r"augdag sql(?: --cache \S+)? \"", text)) + 1
    assert "SELECT level, count(*) AS n FROM curriculum GROUP BY level ORDER BY level" in cookbook  # the shell's
    assert any(q.startswith("SELECT r.src, i.tgt AS old") and "\n" in q for q in cookbook)  # continued lines
    assert any("'$.mix_rows'" in q for q in cookbook)  # `\$` unquoted
    assert [q for where, q in DOCUMENTED if where.startswith("README.md:")] == [
        "SELECT source, reason, count(*) AS n FROM rejects GROUP BY ALL ORDER BY n DESC",
        "SELECT src, tgt FROM synthetic LIMIT 10",
        "SELECT count(*) FROM bitext",
    ]


@pytest.fixture(scope="module")
def demo_cache(tiny_demo_run) -> Path:
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    return tiny_demo_run.cache


@pytest.mark.slow
@pytest.mark.tiny_demo_run
@pytest.mark.parametrize(("where", "query"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_every_documented_query_selects_rows_on_the_tiny_demo(demo_cache, where, query):
    rows = rows_of(demo_cache, query)
    if query in NO_ROWS:
        assert rows == [], f"{where}: selects rows now; take it out of NO_ROWS ({NO_ROWS[query]})"
    else:
        assert len(rows) >= 1, f"{where}: selects no row on the tiny demo: {query}"


@pytest.mark.slow
@pytest.mark.tiny_demo_run
def test_every_query_the_demo_prints_selects_rows(demo_cache, tiny_demo_run):
    printed = [shell_unquote(m.group(1)) for m in SQL_CALL.finditer(tiny_demo_run.stdout)]
    assert len(printed) == 3  # issue 50: three, the rest in docs/sql.md
    assert [q for q in printed if not rows_of(demo_cache, q)] == []


@pytest.mark.slow
@pytest.mark.tiny_demo_run
def test_a_student_translating_through_ctranslate2_is_found_by_its_trained_name(prefect_harness, tiny_demo_run, tmp_path):
    """`train_nmt` again on a copy of the demo with the students' inference through CTranslate2: the trained models are
    the demo's (cached), their conversions are new; the README's student query finds the new rows by `models.name`."""
    copy = tmp_path / "cache"
    ignore = shutil.ignore_patterns("server", "logs", "*.lock", "demo-data")
    shutil.copytree(tiny_demo_run.cache, copy, symlinks=True, ignore=ignore)
    env = subprocess_env(  # read where the demo read; report to the session's Prefect server
        tmp_path, AUGDAG_DEMO_DATA=str(tiny_demo_run.cache / "demo-data"), PREFECT_API_URL=harness_url()
    )
    sets = [a for s in [*TINY_SETS, "train_nmt.student.inference=ctranslate2"] for a in ("--set", s)]
    cmd = [sys.executable, "-m", "flows.cli", "-q", "run", "train_nmt", "--config", "demo", "--cache", str(copy), *sets]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    run_id = rows_of(copy, "SELECT max(run_id) AS r FROM runs WHERE pipeline = 'train_nmt'")[0]["r"]
    student_query = next(q for _, q in DOCUMENTED if "WHERE m.name = 'student' AND e.metric = 'BLEU'" in q)
    found = [r for r in rows_of(copy, student_query) if r["run_id"] == run_id]
    assert sorted(r["testset"] for r in found) == ["demo_test", "demo_test"]  # the two arms' students, seed 1
    ran = rows_of(
        copy,
        "SELECT e.arm, m.name AS trained, c.name AS ran, c.kind, c.meta->>'$.params.source' = e.model AS converted_from "
        "FROM evaluations e JOIN models m ON m.fingerprint = e.model "
        "JOIN models c ON c.fingerprint = e.meta->>'$.inference.model' "
        f"WHERE e.run_id = '{run_id}' AND e.metric = 'BLEU' AND e.meta->>'$.inference.backend' = 'ctranslate2' "
        "ORDER BY e.arm",
    )
    assert ran == [
        {"arm": "bitext", "trained": "student", "ran": "student_ct2", "kind": "ctranslate2", "converted_from": True},
        {"arm": "rejuvenated", "trained": "student", "ran": "student_ct2", "kind": "ctranslate2", "converted_from": True},
    ]
