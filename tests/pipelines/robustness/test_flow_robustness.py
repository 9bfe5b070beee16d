"""The robustness pipeline end to end under Prefect, on the demo grammar's bitext: ingest → align → robust_bitext
over three shards, and robust_mono over the demo's sentences; every row traces to its pair (or sentence), each
modifier's rows are what its definition makes of that pair, a re-run is cached, a new seed recomputes the modifiers
alone, and a misspelt modifier key is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conf.loader import load_profile
from demo import write_demo
from storage.artifacts import ArtifactRef
from tests.conftest import REPO, catalog_rows, subprocess_env

pytestmark = pytest.mark.slow

MODIFIERS = (
    "robustness.modifiers=[{UpperCase: 0.1}, {TitleCase: 0.1}, {Typos: 0.2}, {Tags: 0.2, augment: 0.5}, "
    "{Merge: 0.1, min_lines: 2, max_lines: 3}, {RemoveEndPunct: 1.0}]"
)
SETS = ["shard_size=40", "pipelines=[robustness]", "self_training.aligner.iterations=3", MODIFIERS, "robustness.mono=[demo_mono]"]


@pytest.fixture(scope="module")
def night(prefect_harness, tmp_path_factory):
    from flows.pipelines.robustness import robustness_flow

    data, cache = tmp_path_factory.mktemp("robust-data"), tmp_path_factory.mktemp("robust-cache")
    write_demo(data, seed=5, bitext_rows=100, mono_rows=100, labeled_rows=100, slots_rows=100, test_rows=50)
    conf = load_profile(REPO / "conf" / "demo.yaml", SETS, cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)})
    return cache, conf, data, robustness_flow(conf, profile="test")


def robust(cache, where: str = "TRUE") -> list[dict]:
    return catalog_rows(
        cache,
        "SELECT r.*, b.src AS parent_src, b.tgt AS parent_tgt FROM robust_bitext r JOIN bitext b ON b.uid = r.parent_uid "
        f"WHERE {where} ORDER BY r.uid",
    )


def test_every_row_traces_to_its_pair_and_the_summary_counts_them(night):
    cache, _, _, summary = night
    total = catalog_rows(cache, "SELECT count(*) AS n FROM robust_bitext")[0]["n"]
    assert len(robust(cache)) == total > 0  # the join drops no row: every parent_uid is a pair of the bitext
    by_modifier = {
        r["modifier"]: r["n"] for r in catalog_rows(cache, "SELECT modifier, count(*) AS n FROM robust_bitext GROUP BY ALL")
    }
    r = summary["robustness"]
    pairs = catalog_rows(cache, "SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")[0]["n"]
    assert (r["bitext"], r["pairs"], r["rows"]) == ("demo_bitext", pairs, total)
    assert {m: n for m, n in r["modifiers"].items() if n} == by_modifier
    assert r["modifiers"]["RemoveEndPunct"] == 0  # the demo grammar ends no sentence with punctuation: nothing changed
    assert [s["shards"] for s in summary["stages"] if s["stage"] == "robust_bitext"] == [3]


def test_casing_rows_are_their_pairs_upper_and_title_cased(night):
    cache = night[0]
    upper = robust(cache, "modifier = 'UpperCase'")
    assert upper and all((r["src"], r["tgt"]) == (r["parent_src"].upper(), r["parent_tgt"].upper()) for r in upper)
    title = robust(cache, "modifier = 'TitleCase'")
    assert title and all(r["src"] == " ".join(w[:1].upper() + w[1:] for w in r["parent_src"].split(" ")) for r in title)
    assert all(json.loads(r["params"]) == {"p": 0.1} for r in upper + title)


def test_typos_change_the_source_only(night):
    rows = robust(night[0], "modifier = 'Typos'")
    assert rows and all(r["tgt"] == r["parent_tgt"] and r["src"] != r["parent_src"] for r in rows)


def test_tags_wrap_words_the_aligner_links_one_to_one(night):
    """Every tag of a Tags row (``__source__ w __target__ t __done__``, on the source side) stands for a source word and
    a target word of its pair that the run's alignment artifact links to each other and to nothing else; a row whose
    every candidate drew augment carries no tag and changes both sides."""
    cache = night[0]
    by_uid = {r["uid"]: r["links"] for r in catalog_rows(cache, "SELECT uid, links FROM alignments")}
    rows = robust(cache, "modifier = 'Tags'")
    tagged = [r for r in rows if "__source__" in r["src"]]
    assert tagged and len(tagged) < len(rows)  # both modes drawn (augment: 0.5)
    for r in rows:
        if r not in tagged:
            assert r["src"] != r["parent_src"] and r["tgt"] != r["parent_tgt"] and "__" not in r["src"] + r["tgt"]
            continue
        pairs = {tuple(map(int, p.split("-"))) for p in by_uid[r["parent_uid"]].split()}
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        one_to_one = {(s, t) for s, t in pairs if sources.count(s) == 1 and targets.count(t) == 1}
        words, src, tgt = r["src"].split(), r["parent_src"].split(), r["parent_tgt"].split()
        assert words.count("__source__") == words.count("__done__")  # its target may hold an augment's insertions
        for k in (i for i, w in enumerate(words) if w == "__source__"):
            source_word, marker, target_word, done = words[k + 1 : k + 5]
            assert (marker, done) == ("__target__", "__done__"), r["src"]
            assert any(src[i] == source_word and tgt[j] == target_word for i, j in one_to_one), (r["src"], r["parent_tgt"])


def test_merges_join_consecutive_lines_of_one_shard(night):
    rows = robust(night[0], "modifier = 'Merge'")
    assert rows
    lines = {r["uid"]: r["line"] for r in catalog_rows(night[0], "SELECT uid, line FROM bitext WHERE source = 'demo_bitext'")}
    for r in rows:
        parts = [lines[u] for u in r["parents"]]
        assert 2 <= len(parts) <= 3 and parts[0] == r["line"]
        assert r["src"] == " ".join(
            catalog_rows(night[0], f"SELECT src FROM bitext WHERE uid = '{u}'")[0]["src"] for u in r["parents"]
        )


def test_mono_sentences_get_the_one_sided_modifiers_and_trace_to_their_sentence(night):
    """robust_mono: UpperCase, TitleCase and Typos of the list change the demo's monolingual sentences (Tags and Merge
    need a pair), each row's text what the modifier makes of its parent's, counted in the summary and its line."""
    from flows.pipelines.robustness import summary_lines

    cache, _, _, summary = night
    rows = catalog_rows(
        cache,
        "SELECT r.*, m.text AS parent FROM robust_mono r JOIN mono m ON m.uid = r.parent_uid AND m.source = r.source",
    )
    assert len(rows) == catalog_rows(cache, "SELECT count(*) AS n FROM robust_mono")[0]["n"] > 0
    made = {r["modifier"] for r in rows}
    assert made == {"UpperCase", "TitleCase", "Typos"}  # RemoveEndPunct: the demo grammar writes no punctuation
    for r in rows:
        assert r["text"] != r["parent"] and r["source"] == "demo_mono"
        if r["modifier"] == "UpperCase":
            assert r["text"] == r["parent"].upper()
        if r["modifier"] == "TitleCase":
            assert r["text"] == " ".join(w[:1].upper() + w[1:] for w in r["parent"].split())
    mono = summary["robustness"]["mono"]["demo_mono"]
    sentences = catalog_rows(cache, "SELECT count(*) AS n FROM mono WHERE source = 'demo_mono'")[0]["n"]
    assert (mono["sentences"], mono["rows"]) == (sentences, len(rows))
    assert mono["modifiers"] == {
        m: sum(r["modifier"] == m for r in rows) for m in ("UpperCase", "TitleCase", "Typos", "RemoveEndPunct")
    }
    n = mono["modifiers"]
    assert summary_lines(summary)[1] == (
        f"robustness: {len(rows):,} rows from {sentences:,} sentences of demo_mono (UpperCase {n['UpperCase']:,}, "
        f"TitleCase {n['TitleCase']:,}, Typos {n['Typos']:,}, RemoveEndPunct 0)"
    )


def test_a_rerun_is_cached_and_a_new_seed_recomputes_the_modifiers_alone(night):
    from flows.pipelines.robustness import robustness_flow

    cache, conf, data, summary = night
    again = robustness_flow(conf, profile="test")
    assert {s["status"] for s in again["stages"]} == {"cached"}
    assert again["robustness"] == summary["robustness"]
    reseeded = load_profile(
        REPO / "conf" / "demo.yaml", [*SETS, "robustness.seed=1"], cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)}
    )
    other = robustness_flow(reseeded, profile="test")
    assert {s["stage"] for s in other["stages"] if s["status"] == "computed"} == {"robust_bitext", "robust_mono"}
    assert other["robustness"]["rows"] > 0 and other["robustness"]["modifiers"] != summary["robustness"]["modifiers"]


def test_a_misspelt_modifier_key_is_one_line_naming_it_and_exit_2(tmp_path):
    (tmp_path / "x.en").write_text("a b\n")
    (tmp_path / "x.de").write_text("c d\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "pipelines: [robustness]\n"
        f"datasets:\n  pair: {{kind: bitext, format: text, src: {tmp_path}/x.en, tgt: {tmp_path}/x.de}}\n"
        "robustness:\n  modifiers:\n    - UpperCase: 0.1\n    - Typos: 0.05\n      char_swp: 0.1\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "--cache", str(tmp_path / "cache"), "run", "robustness", "--config", str(profile)],
        env=subprocess_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: {profile}:7: robustness.modifiers.1: Typos: char_swp is not a key of Typos; expected one of Typos, "
        "char_swap, missing_char, extra_char, nearby_char, similar_char, skipped_space, random_space, repeated_char, unichar"
    ]
    assert not (tmp_path / "cache" / "artifacts").exists()


def test_shares_follow_p_over_the_shards(night):
    """UpperCase at p = 0.1 picks each pair by its own draw: about a tenth of the pairs, whatever the shards."""
    cache = night[0]
    n = catalog_rows(cache, "SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")[0]["n"]
    upper = catalog_rows(cache, "SELECT count(*) AS n FROM robust_bitext WHERE modifier = 'UpperCase'")[0]["n"]
    assert abs(upper / n - 0.1) <= 3 * (0.1 * 0.9 / n) ** 0.5


def test_the_report_shows_rows_per_modifier_and_three_of_each_beside_their_originals(night):
    from flows.pipelines.robustness import examples

    cache, _, _, summary = night
    made = {m: n for m, n in summary["robustness"]["modifiers"].items() if n}
    page = Path(summary["reports"]["robustness_html"]).read_text(encoding="utf-8")
    assert "Rows per modifier" in page and all(f">{m}<" in page for m in made)
    fp = {s["stage"]: s["fingerprint"] for s in summary["stages"] if s.get("dataset") in (None, "demo_bitext")}
    bitext = ArtifactRef(str(cache), "clean", fp["clean"], "bitext", "demo_bitext", 3)
    robust = ArtifactRef(str(cache), "robust_bitext", fp["robust_bitext"], "robust_bitext", "demo_bitext", 3)
    shown = examples(bitext, robust)
    assert {m: shown["modifier"].to_pylist().count(m) for m in made} == {m: min(3, n) for m, n in made.items()}
    # the first run's artifacts (a later test re-runs with another seed: the view shows the newest)
    pairs = {r["uid"]: (r["src"], r["tgt"]) for r in bitext.parts().table(["uid", "src", "tgt"]).to_pylist()}
    made_rows = robust.parts().table(["parent_uid", "modifier", "src", "tgt"]).to_pylist()
    parent = {(r["modifier"], r["src"], r["tgt"]): pairs[r["parent_uid"]] for r in made_rows}
    for r in shown.to_pylist():  # each example beside its own original pair (a merge: its first)
        assert (r["original src"], r["original tgt"]) == parent[(r["modifier"], r["src"], r["tgt"])]
