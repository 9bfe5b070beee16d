"""`augdag demo` end to end, as a newcomer runs it: the session's one demo run (tests/shared_demo.py), its suggested
queries, each pipeline's outputs, its totals, a second night that computes nothing, the views' documentation and the
report page. Its own file, collected last (tests/conftest.py): a worker reaches it when the demo has finished."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from demo import ambiguous_words
from flows.cli import app
from flows.engine import registry
from storage.views.docs import TABLES, UNDOCUMENTED
from tests import shared_demo
from tests.cli.test_cli import PREFECT_SQLITE_LOCKED
from tests.conftest import DEMO_PIPELINES, subprocess_env

runner = CliRunner()


@pytest.mark.slow
@pytest.mark.demo_run
@pytest.mark.timeout(shared_demo.WAIT_S + 900)  # the shared demo (tests/shared_demo.py), then a second night
def test_augdag_demo_exits_0_from_a_clean_cache_with_networking_off(demo_run, tmp_path):
    """`augdag demo` end to end in a subprocess; inside `unshare -n` (loopback only) where permitted."""
    output = demo_run.stdout + demo_run.stderr
    assert demo_run.returncode == 0, output[-4000:]
    output = PREFECT_SQLITE_LOCKED.sub("", output)
    assert "Traceback" not in output and "ERROR" not in output
    if demo_run.offline:
        assert "ConnectError" not in output and "Name or service not known" not in output
    proc = demo_run
    queries = [line.split("augdag sql", 1)[1] for line in proc.stdout.splitlines() if "augdag sql" in line]
    assert len(queries) == 3  # issue 50: three, the rest in docs/sql.md
    assert len(proc.stdout.splitlines()) < 60, proc.stdout  # issue 50: one screen
    for q in queries:  # every query the demo suggests runs
        assert runner.invoke(app, ["sql", q.split('"')[1], "--cache", str(demo_run.cache)]).exit_code == 0, q
    cache = str(demo_run.cache)

    def rows(sql: str) -> list[dict]:
        out = runner.invoke(app, ["sql", sql, "-f", "json", "--cache", cache])
        assert out.exit_code == 0, out.output
        return [json.loads(line) for line in out.output.splitlines()]

    # issue 50: the summary lines are not on the demo's screen (-v prints them, and the report): read from the night
    recorded = json.loads(rows("SELECT summary FROM runs WHERE pipeline = 'nightly'")[0]["summary"])
    said = "\n".join(line for c in recorded["pipelines"] for line in registry.summary_lines(c))
    found = rows(
        "SELECT (SELECT count(*) FROM bitext WHERE source = 'demo_bitext') AS view_rows, (SELECT rows FROM "
        "artifacts WHERE stage = 'clean' AND dataset = 'demo_bitext') AS clean_rows, (SELECT count(*) "
        "FROM rejects WHERE source = 'demo_bitext') AS rejected"
    )[0]
    assert found["view_rows"] == found["clean_rows"] and found["rejected"] == 5  # 5 planted bad pairs in 3,000
    top = rows("SELECT src FROM word_uncertainty ORDER BY H DESC LIMIT 8")
    assert {r["src"] for r in top} == set(ambiguous_words())  # issue 3
    found = rows(
        "SELECT (SELECT count(*) FROM sampled_mono) AS n, (SELECT count(*) FROM mono WHERE source = 'demo_mono') AS mono"
    )[0]
    assert found["n"] == int(0.2 * found["mono"])  # budget_ratio 0.2 of the cleaned monolingual rows
    found = rows(
        "SELECT (SELECT count(*) FROM synthetic s JOIN sampled_mono m ON s.parent_uid = m.uid "
        "AND s.src = m.text) AS synthetic, (SELECT count(*) FROM sampled_mono) AS sampled, "
        "(SELECT count(*) FROM inactive) AS inactive, (SELECT count(*) FROM rejuvenated WHERE "
        "origin = 'rejuvenated') AS rejuvenated, (SELECT count(*) FROM pair_scores WHERE prob IS "
        "NOT NULL) AS scored, (SELECT score FROM evaluations WHERE metric = 'BLEU' AND arm = 'bitext' "
        "AND testset = 'demo_test') AS bleu"
    )[0]
    # issue 4: the teacher, rejuvenation and the student in the demo
    assert 0.5 * found["sampled"] < found["synthetic"] <= found["sampled"]  # filters drop some, lineage on all
    assert found["inactive"] == found["rejuvenated"] == int(0.1 * found["scored"])
    assert found["bleu"] > 20  # a minute of training learns much of the demo grammar
    assert "BLEU = " in said and "nrefs:1|case:mixed" in said
    # issue 17: arms against the baseline bitext, p-values for the others; issue 50: each on demo_test and its
    # upper- and title-cased copies (BLEU and chrF: 6 evaluations a student)
    arms = rows(
        "SELECT arm, bool_and(p_value IS NULL) AS baseline, count(*) AS n FROM evaluations "
        "WHERE model_name = 'student' GROUP BY arm ORDER BY arm"
    )
    assert [(a["arm"], a["baseline"], a["n"]) for a in arms] == [
        ("bitext", True, 6),
        ("para_10_1_ct", False, 6),
        ("rejuvenated", False, 6),
        ("robust", False, 6),
        ("synthetic", False, 6),
    ]
    assert "paraphrase 10:1 + CT: " in said and " BLEU (p = " in said
    # issue 47: the demo's one seed has no spread, and its p says what it resampled
    assert "BLEU = " in said and " ± n/a (1 seed), chrF = " in said
    assert not re.search(r" ± 0\.00?(?![0-9])", said)  # no spread of 0 for one seed (the taggers' 3 seeds: ± 0.0051)
    assert "; p resamples test sentences; training variance not measured: use ≥ 3 seeds" in said
    found = rows(
        "SELECT (SELECT count(*) FROM curriculum WHERE level = 0) AS originals, "
        "(SELECT count(*) FROM labeled WHERE source = 'demo_labeled') AS labeled, "
        "(SELECT count(*) FROM curriculum c ANTI JOIN labeled l ON l.uid = c.parent_uid) AS orphans, "
        "(SELECT score FROM evaluations WHERE metric = 'accuracy' AND model_name = 'classifier') AS accuracy"
    )[0]
    # issue 5: the paraphrase curriculum and its classifier in the demo
    assert found["originals"] == found["labeled"] and found["orphans"] == 0
    per_level = rows(
        "SELECT level, count(*) AS n, count(DISTINCT parent_uid) AS sentences FROM curriculum "
        "WHERE level > 0 GROUP BY level ORDER BY level"
    )
    assert [r["level"] for r in per_level] == [1, 2, 3, 4, 5]
    assert all(r["n"] == 2 * r["sentences"] for r in per_level)  # the demo's 10 kept (repeat), 2 per level
    assert found["accuracy"] > 0.5  # 6 topics; measured 0.73 with the demo's 300 labelled rows
    assert "generator: round trip: ctranslate2" in said and "similarity: chrf" in said
    assert "accuracy = " in said and "classes:6|average:macro" in said
    # issue 15: EPiDA in the demo, two online rounds of 9 EDA candidates per row, 3 kept
    per_round = rows(
        "SELECT round, count(*) AS scored, count(*) FILTER (WHERE selected) AS kept, "
        "count(DISTINCT parent_uid) AS originals FROM augmented GROUP BY round ORDER BY round"
    )
    assert [(r["round"], r["scored"], r["kept"]) for r in per_round] == [
        (r, 9 * found["labeled"], 3 * found["labeled"]) for r in (0, 1)
    ]
    assert "epida (both, online, K = 3, m = 3) round 1: kept" in said
    # issue 16: C2C-GenDA and the slot taggers in the demo
    found = rows(
        "SELECT (SELECT count(*) FROM c2c_generated) AS kept, (SELECT count(*) FROM c2c_generated g ANTI JOIN "
        "cluster_pairs p ON p.cluster = g.parent_cluster) AS orphans, (SELECT count(*) FROM c2c_generated g "
        "JOIN delexicalised d ON d.text = g.delex) AS copies, (SELECT count(DISTINCT arm) FROM evaluations "
        "WHERE model_name = 'slot_tagger' AND metric = 'f1') AS arms"
    )[0]
    assert found["kept"] > 0 and found["orphans"] == 0 and found["copies"] == 0 and found["arms"] == 2
    assert "c2c diversity (delexicalised): Inter ratio" in said and "(original+c2c, " in said
    # issue 30: OpusTrainer's modifiers as rows with lineage; the demo grammar ends no sentence with punctuation
    per_modifier = {
        r["modifier"]: (r["n"], r["orphans"])
        for r in rows(
            "SELECT modifier, count(*) AS n, count(*) FILTER (WHERE parent_uid NOT IN (SELECT uid FROM bitext)) AS orphans "
            "FROM robust_bitext GROUP BY modifier"
        )
    }
    assert sorted(per_modifier) == ["Merge", "Tags", "TitleCase", "Typos", "UpperCase"]
    assert all(n > 0 and orphans == 0 for n, orphans in per_modifier.values())
    assert "robustness: " in said and "RemoveEndPunct 0)" in said
    mono = rows(
        "SELECT modifier, count(*) AS n, count(*) FILTER (WHERE parent_uid NOT IN (SELECT uid FROM mono)) AS orphans "
        "FROM robust_mono GROUP BY modifier ORDER BY modifier"
    )
    assert [r["modifier"] for r in mono] == ["TitleCase", "Typos", "UpperCase"] and all(r["orphans"] == 0 for r in mono)
    assert " sentences of demo_mono (UpperCase " in said
    # issue 6: the demo is one nightly run; its totals add up to the shard records of its pipelines, each
    # artifact's shards once however many pipelines read it (a re-read is cached: counted again, rows double)
    first = json.loads(rows("SELECT summary FROM runs WHERE pipeline = 'nightly'")[0]["summary"])
    children = first["pipelines"]
    # issue 18: Prefect's INFO and fairseq's training log go to the run's log (`augdag logs`), not the terminal
    assert " | INFO " not in output and "fairseq_cli" not in output
    student = runner.invoke(app, ["logs", first["run_id"], "--stage", "student", "--cache", cache])
    assert student.exit_code == 0, student.output
    assert "| augdag.fairseq - Task run 'fairseq' (student) - INFO:fairseq_cli.train:" in student.output
    assert [c["pipeline"] for c in children] == DEMO_PIPELINES and {c["status"] for c in children} == {"completed"}
    ids = ", ".join(f"'{c['run_id']}'" for c in children)
    shards = rows(
        f"SELECT count(*) AS n, count(*) FILTER (computed) AS computed, sum(rows_out)::BIGINT AS rows_out "
        f"FROM (SELECT fingerprint, shard, bool_or(status = 'computed') AS computed, max(rows_out) AS rows_out "
        f"FROM stage_runs WHERE run_id IN ({ids}) GROUP BY fingerprint, shard)"
    )[0]
    models = {}
    for m in (s for c in children for s in c["stages"] if s["kind"] == "model"):  # once each, computed if it was
        models[m["fingerprint"]] = m if m["status"] == "computed" else models.get(m["fingerprint"], m)
    models = list(models.values())
    t = first["totals"]
    assert t["shards"] == shards["n"] + len(models) == t["shards_computed"] + t["shards_cached"]
    assert t["shards_computed"] == shards["computed"] + sum(m["shards_computed"] for m in models)
    assert t["rows_out"] == shards["rows_out"] and t["pipelines"] == {"completed": len(DEMO_PIPELINES)}
    assert t["rejects"] == rows("SELECT count(*) AS n FROM rejects")[0]["n"]  # each rejected input row once
    # a second night over unchanged inputs computes nothing
    night = subprocess.run(
        [sys.executable, "-m", "flows.cli", "nightly", "--config", "demo", "--cache", cache],
        env=subprocess_env(tmp_path, COLUMNS="200", AUGDAG_DEMO_DATA=f"{cache}/demo-data"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert night.returncode == 0, night.stdout[-3000:] + night.stderr[-3000:]
    second = json.loads(rows("SELECT summary FROM runs WHERE pipeline = 'nightly' ORDER BY started_at DESC")[0]["summary"])
    assert second["totals"]["shards_computed"] == 0 and second["totals"]["shards_cached"] == t["shards"]
    assert second["totals"]["rows_out"] == t["rows_out"] and second["totals"]["stages"] == {
        "cached": len({s["fingerprint"] for c in children for s in c["stages"]})
    }
    assert f"shards: 0 computed, {t['shards']:,} cached" in night.stdout
    # every column of every table and view is documented (`augdag views`)
    columns = [json.loads(line) for line in runner.invoke(app, ["views", "-f", "json", "--cache", cache]).output.splitlines()]
    # (rejects_legacy exists only in a catalog migrated from before issue 51: tests/storage/test_rejects_view.py)
    assert {c["name"] for c in columns} == (set(TABLES) - {"rejects_legacy"}) | set(registry.view_docs())
    assert [(c["name"], c["column"]) for c in columns if c["description"] == UNDOCUMENTED] == []
    # the nightly's report page holds every plot of its pipelines and loads nothing from the network
    report = runner.invoke(app, ["report", first["run_id"], "--cache", cache])
    assert report.exit_code == 0, report.output
    page = (Path(cache) / "reports" / first["run_id"] / "run.html").read_text()
    plots = [p for c in children for p in (Path(cache) / "reports" / c["run_id"]).glob("*.png")]
    assert len(plots) >= 4 and page.count('src="data:image/png;base64,') == len(plots)
    assert "<script src" not in page and "http://" not in page and "https://" not in page
    if not demo_run.offline:
        pytest.skip("ran with networking on: `unshare -n` is not permitted here")
