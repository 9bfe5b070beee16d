"""Sentence splitting of monolingual paragraphs (issue 18, item 5): `split_sentences: true` on a mono dataset gives a
row per sentence (Moses' splitter, the `sentence-splitter` package), with its input `line` and its `sentence` index;
duplicates and clean then work per sentence, and `augdag why` shows a line's sentences."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from conf.errors import ConfError
from conf.loader import load_profile
from conf.schema import DatasetConf
from storage.catalog import Catalog
from storage.parts import Parts
from storage.schemas import MONO, with_uid
from tasks.ingest.clean import clean, find_duplicates
from tasks.ingest.sentences import SENTENCES, split_sentences
from tests.conftest import REPO, subprocess_env

PARAGRAPHS = [
    "Mr. Smith arrived at 5 p.m. yesterday. He left soon after! Did he stay?",
    "One sentence only.",
    "Yes. Yes. One sentence only.",
    "Dr. Jones met Mrs. Brown at 10 a.m. on Monday. Room No. 7 was free.",
]
# (line, sentence, text): "Mr.", "Dr.", "Mrs.", "p.m.", "a.m." and "No. 7" end no sentence
SENTENCES_OF_PARAGRAPHS = [
    (1, 1, "Mr. Smith arrived at 5 p.m. yesterday."),
    (1, 2, "He left soon after!"),
    (1, 3, "Did he stay?"),
    (2, 1, "One sentence only."),
    (4, 1, "Yes."),
    (4, 2, "Yes."),
    (4, 3, "One sentence only."),
    (5, 1, "Dr. Jones met Mrs. Brown at 10 a.m. on Monday."),
    (5, 2, "Room No. 7 was free."),
]
LANGUAGES = "ca, cs, da, de, el, en, es, fi, fr, hu, is, it, lt, lv, nl, no, pl, pt, ro, ru, sk, sl, sv, tr"


def mono(texts: list[str], lines: list[int], source: str = "news") -> pa.Table:
    n = len(texts)
    return with_uid(
        pa.table(
            {"uid": pa.nulls(n, pa.string()), "text": texts, "source": [source] * n, "line": pa.array(lines, pa.int64())},
            schema=MONO,
        ),
        "mono",
    )


def triples(table: pa.Table) -> list[tuple[int, int, str]]:
    return list(zip(table["line"].to_pylist(), table["sentence"].to_pylist(), table["text"].to_pylist()))


# -- the stage -------------------------------------------------------------------------------------------------------


def test_split_sentences_gives_each_sentence_its_line_and_index_and_keeps_abbreviations_together():
    out = split_sentences(mono(PARAGRAPHS, [1, 2, 4, 5]))
    assert out["part"].schema == SENTENCES  # the mono columns + sentence (int32)
    assert triples(out["part"]) == SENTENCES_OF_PARAGRAPHS
    assert out["dropped"].num_rows == 0


def test_split_sentences_in_german_keeps_its_own_abbreviations():
    out = split_sentences(mono(["Herr Dr. Müller kam um 5 Uhr. Er ging bald. Das ist z.B. gut."], [3]), language="de")
    assert triples(out["part"]) == [(3, 1, "Herr Dr. Müller kam um 5 Uhr."), (3, 2, "Er ging bald."), (3, 3, "Das ist z.B. gut.")]


def test_split_sentences_uid_is_the_sentence_content_uid_stable_across_shards_and_runs():
    out = split_sentences(mono(PARAGRAPHS, [1, 2, 4, 5]))["part"]
    uids = out["uid"].to_pylist()
    # the uid any mono row of that source and text has (storage.schemas.with_uid): md5 of source and content
    assert uids == with_uid(out.drop_columns(["sentence"]), "mono")["uid"].to_pylist()
    assert uids[1] == with_uid(mono(["He left soon after!"], [99]), "mono")["uid"][0].as_py()
    # distinct sentences, distinct uids; the same sentence twice (line 4's "Yes.", line 2's and 4's "One
    # sentence only."), one uid: the key the duplicates stage groups on
    assert len(set(uids)) == len(set(out["text"].to_pylist())) == 7
    assert uids[4] == uids[5] and uids[3] == uids[6]
    # stable: the same rows split again, or split shard by shard, give the same uids
    again = pa.concat_tables(
        [split_sentences(mono(PARAGRAPHS[:2], [1, 2]))["part"], split_sentences(mono(PARAGRAPHS[2:], [4, 5]))["part"]]
    )
    assert again.equals(out)
    # another source: other uids
    other = split_sentences(mono(PARAGRAPHS, [1, 2, 4, 5], source="web"))["part"]["uid"].to_pylist()
    assert not set(other) & set(uids)


def test_split_sentences_drops_a_line_without_a_sentence_as_no_sentence_and_accounts_for_every_line():
    rows = mono(["First one. Second one.", "   ", "\x1f", "", "Last."], [1, 2, 3, 4, 5])
    out = split_sentences(rows)
    assert triples(out["part"]) == [(1, 1, "First one."), (1, 2, "Second one."), (5, 1, "Last.")]
    dropped = out["dropped"]
    assert dropped.column_names == [*MONO.names, "reason"]  # the input row, as every filter's drops
    assert list(zip(dropped["line"].to_pylist(), dropped["reason"].to_pylist())) == [
        (2, "no_sentence"),
        (3, "no_sentence"),
        (4, "no_sentence"),
    ]
    assert dropped["uid"].to_pylist() == rows["uid"].to_pylist()[1:4]  # the input line's uid
    # input lines = lines with a sentence + dropped lines
    assert len(set(out["part"]["line"].to_pylist())) + dropped.num_rows == rows.num_rows == 5


def test_split_sentences_of_no_rows_is_empty_and_typed():
    out = split_sentences(mono([], []))
    assert (out["part"].schema, out["part"].num_rows, out["dropped"].num_rows) == (SENTENCES, 0, 0)


def test_duplicates_and_clean_keep_the_first_occurrence_by_line_then_sentence(tmp_path):
    # two shards: "One sentence only." at line 2 (shard 0) and line 4 sentence 3 (shard 1); "Yes." twice in line 4
    shards = [split_sentences(mono(PARAGRAPHS[:2], [1, 2]))["part"], split_sentences(mono(PARAGRAPHS[2:], [4, 5]))["part"]]
    dups = find_duplicates(Parts.of_tables(shards, tmp_path / "parts"))
    assert [(r["first_line"], r["first_sentence"], r["copies"]) for r in dups.to_pylist()] == [(2, 1, 2), (4, 1, 2)]
    out = [clean(s, dups, kind="mono") for s in shards]
    kept = pa.concat_tables([o["part"] for o in out])
    assert triples(kept) == [t for t in SENTENCES_OF_PARAGRAPHS if t[:2] not in ((4, 2), (4, 3))]
    assert kept.schema == SENTENCES  # clean keeps the sentence column
    dropped = pa.concat_tables([o["dropped"] for o in out])
    assert [(r["line"], r["sentence"], r["reason"]) for r in dropped.to_pylist()] == [(4, 2, "duplicate"), (4, 3, "duplicate")]
    assert len(set(kept["uid"].to_pylist())) == kept.num_rows  # after clean, one row per uid


def test_self_training_scores_and_samples_split_sentences_one_by_one(tmp_path):
    from tasks.self_training.uncertainty import sentence_uncertainty, take_sample

    part = split_sentences(mono(PARAGRAPHS, [1, 2, 4, 5]))["part"]
    kept = clean(part, find_duplicates(Parts.of_tables([part], tmp_path / "parts")), kind="mono")["part"]
    words = pa.table({"src": ["Yes.", "He", "left"], "H": [0.5, 1.0, 2.0], "links": [1, 1, 1], "freq": [1, 1, 1]})
    scored = sentence_uncertainty(kept, words, column="text")  # Eq. 6.3 per sentence: mean H, unknown words 0
    assert scored["uid"].equals(kept["uid"]) and scored["line"].to_pylist() == [1, 1, 1, 2, 4, 5, 5]
    assert scored["uncertainty"].to_pylist() == pytest.approx([0, (1 + 2) / 4, 0, 0, 0.5, 0, 0])
    picked = scored.take([1, 4])  # the sample's rows: "He left soon after!" (1, 2) and "Yes." (4, 1)
    selected = pa.table(
        {
            "uid": picked["uid"],
            "source": picked["source"],
            "line": picked["line"],
            "uncertainty": picked["uncertainty"],
            "p": [0.6, 0.4],
            "rank": pa.array([1, 2], pa.int64()),
        }
    )
    sample = take_sample(kept, selected)  # by uid: another sentence of the same line is not drawn with it
    assert list(zip(sample["line"].to_pylist(), sample["text"].to_pylist(), sample["rank"].to_pylist())) == [
        (1, "He left soon after!", 1),
        (4, "Yes.", 2),
    ]
    split = take_sample(kept, selected, split=True)  # the flow's setting for a split dataset (issue 26)
    assert split.column_names == ["uid", "text", "source", "line", "sentence", "uncertainty", "p", "rank", "method"]
    assert split.drop_columns(["sentence"]).equals(sample) and split["sentence"].to_pylist() == [2, 1]


def test_synthetic_pairs_keep_the_sentence_of_a_split_line(monkeypatch):
    import tasks.common.nmt
    from tasks.common.nmt import translate_mono

    monkeypatch.setattr(tasks.common.nmt, "translate_column", lambda texts, **_: pa.array([t.upper() for t in texts.to_pylist()]))
    part = split_sentences(mono(PARAGRAPHS[2:3], [4]))["part"]  # "Yes. Yes. One sentence only."
    pairs = translate_mono(part, model=None, model_path=None, runtime=None, decode=None, model_fingerprint="fp")
    assert pairs.column_names == ["uid", "src", "tgt", "source", "line", "sentence", "parent_uid", "model"]
    assert list(zip(pairs["line"].to_pylist(), pairs["sentence"].to_pylist(), pairs["tgt"].to_pylist())) == [
        (4, 1, "YES."),
        (4, 2, "YES."),
        (4, 3, "ONE SENTENCE ONLY."),
    ]
    unsplit = translate_mono(
        part.drop_columns(["sentence"]), model=None, model_path=None, runtime=None, decode=None, model_fingerprint="fp"
    )
    assert "sentence" not in unsplit.column_names  # an unsplit dataset's pairs are as before


# -- the configuration -----------------------------------------------------------------------------------------------


def _profile(tmp_path: Path, dataset: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text("datasets:\n  news:\n" + textwrap.indent(textwrap.dedent(dataset).strip("\n"), "    ") + "\n")
    return path


def _conf_error(path: Path) -> str:
    with pytest.raises(ConfError) as info:
        load_profile(path, [], environ={})
    return str(info.value)


def test_split_sentences_on_a_bitext_is_a_conf_error_naming_the_key(tmp_path):
    path = _profile(
        tmp_path,
        """
        kind: bitext
        format: tsv
        path: b.tsv
        split_sentences: true
        """,
    )
    assert _conf_error(path) == (
        f"{path}:6: datasets.news.split_sentences: splits the lines of a `mono` dataset into "
        "sentences; this one is kind 'bitext', found True"
    )


def test_split_sentences_language_the_splitter_lacks_is_a_conf_error_listing_its_languages(tmp_path):
    path = _profile(
        tmp_path,
        """
        kind: mono
        format: text
        path: m.txt
        split_sentences: true
        language: xx
        """,
    )
    assert _conf_error(path) == (
        f"{path}:7: datasets.news.language: the sentence splitter has no non-breaking "
        f"prefixes for this language; expected one of {LANGUAGES}, found 'xx'"
    )
    unsplit = _profile(tmp_path, "{kind: mono, format: text, path: m.txt, language: xx}")
    assert load_profile(unsplit, [], environ={}).datasets["news"].language == "xx"  # unused, so not checked


def test_split_sentences_keys_stay_out_of_the_dump_and_of_the_read_fingerprint():
    from tasks.ingest.read import read_params

    plain = DatasetConf(kind="mono", format="text", path=Path("m.txt"))
    split = plain.model_copy(update={"split_sentences": True, "language": "de"})
    assert "split_sentences" not in plain.model_dump() and "language" not in plain.model_dump()
    assert split.model_dump()["split_sentences"] is True
    # the read before the split is the same read: turning splitting on or off reads nothing again
    assert read_params("news", split, max_line_chars=9, shard_size=9) == read_params(
        "news", plain, max_line_chars=9, shard_size=9
    )


# -- through the ingest flow, the catalog and `augdag why` -------------------------------------------------------------

PROFILE = """\
pipelines: [ingest]
shard_size: 2
datasets:
  news: {kind: mono, format: text, path: news.txt, split_sentences: true}
  plain: {kind: mono, format: text, path: plain.txt}
"""


def _data(root: Path) -> Path:
    lines = [PARAGRAPHS[0], PARAGRAPHS[1], "", PARAGRAPHS[2], PARAGRAPHS[3]]  # line 3 is blank: rejected by the read
    (root / "news.txt").write_text("".join(f"{line}\n" for line in lines))
    (root / "plain.txt").write_text("A line. Not split.\n")
    (root / "p.yaml").write_text(PROFILE)
    return root / "p.yaml"


@pytest.fixture(scope="module")
def ingested(prefect_harness, tmp_path_factory):
    from flows.pipelines.ingest import ingest_flow

    profile, cache = _data(tmp_path_factory.mktemp("split-data")), tmp_path_factory.mktemp("split-cache")
    return profile, cache, ingest_flow(load_profile(profile, [], cache=cache, environ={}), profile="test")


@pytest.mark.slow
def test_ingest_splits_the_flagged_dataset_into_the_mono_view_and_leaves_the_other_alone(ingested):
    _, cache, summary = ingested
    stages = {(s["stage"], s["dataset"]): s for s in summary["stages"]}
    assert sorted(st for st, ds in stages if ds == "plain") == ["clean", "duplicates", "read"]
    assert sorted(st for st, ds in stages if ds == "news") == ["clean", "duplicates", "read", "split_sentences"]
    read, split, kept = (stages[(st, "news")]["rows_out"] for st in ("read", "split_sentences", "clean"))
    assert (read["part"], read["rejects"]) == (4, 1)
    assert (split["part"], split["dropped"]) == (9, 0)  # 4 lines -> 9 sentences, none without a sentence
    assert (kept["part"], kept["dropped"]) == (7, 2)
    rows = Catalog(cache).query("SELECT line, sentence, text FROM mono WHERE source = 'news' ORDER BY line, sentence")
    assert [tuple(r.values()) for r in rows.to_pylist()] == [t for t in SENTENCES_OF_PARAGRAPHS if t[:2] not in ((4, 2), (4, 3))]
    assert Catalog(cache).query("SELECT line, sentence, text FROM mono WHERE source = 'plain'").to_pylist() == [
        {"line": 1, "sentence": None, "text": "A line. Not split."}
    ]
    drops = (
        Catalog(cache)
        .query("SELECT stage, reason, line, sentence FROM dropped WHERE source = 'news' ORDER BY line, sentence")
        .to_pylist()
    )
    assert drops == [{"stage": "clean", "reason": "duplicate", "line": 4, "sentence": s} for s in (2, 3)]


@pytest.mark.slow
def test_ingest_rerun_of_a_split_dataset_is_cached(ingested):
    from flows.pipelines.ingest import ingest_flow

    profile, cache, first = ingested
    again = ingest_flow(load_profile(profile, [], cache=cache, environ={}), profile="test")
    assert {s["status"] for s in again["stages"]} == {"cached"}
    assert [s["fingerprint"] for s in again["stages"]] == [s["fingerprint"] for s in first["stages"]]


@pytest.mark.slow
def test_why_shows_the_sentences_of_a_split_line_and_where_each_went(ingested):
    from flows.cli.why import describe
    from storage.dropped import row_path

    _, cache, summary = ingested
    run = summary["run_id"]
    path = row_path(Catalog(cache), "news", 4)
    yes, one = (with_uid(mono([t], [0]), "mono")["uid"][0].as_py() for t in ("Yes.", "One sentence only."))
    assert [(s.sentence, s.uid) for s in path.sentences] == [(1, yes), (2, yes), (3, one)]
    assert describe(path) == [
        f"[bold]news:4[/]  uid {mono([PARAGRAPHS[2]], [4])['uid'][0].as_py()}",
        f"  read: kept  (run {run})",
        "  split_sentences: 3 sentences",
        f"  sentence 1  uid {yes}",
        "    in views: mono",
        f"  sentence 2  uid {yes}",
        f"    clean: [red]dropped[/], duplicate: the same sentence as line 4 sentence 1, which is kept  (run {run})",
        f"  sentence 3  uid {one}",
        f"    clean: [red]dropped[/], duplicate: the same sentence as line 2 sentence 1, which is kept  (run {run})",
    ]
    single = row_path(Catalog(cache), "news", 2)  # one sentence: its uid is the line's, the sentence is in mono
    assert (single.uid, [(s.sentence, s.uid, s.views) for s in single.sentences]) == (one, [(1, one, {"mono": 1})])
    plain = row_path(Catalog(cache), "plain", 1)
    assert (plain.sentences, plain.views) == ((), {"mono": 1})


@pytest.mark.slow
def test_why_cli_prints_a_split_line_sentence_by_sentence(ingested, tmp_path):
    _, cache, summary = ingested
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "why", "news", "1", "--cache", str(cache)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=subprocess_env(tmp_path),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split("  uid ")[0] for line in done.stdout.splitlines()] == [
        "news:1",
        "  text: Mr. Smith arrived at 5 p.m. yesterday. He left soon after! Did he stay?",  # issue 26
        f"  read: kept  (run {summary['run_id']})",
        "  split_sentences: 3 sentences",
        "  sentence 1",
        "    in views: mono",
        "  sentence 2",
        "    in views: mono",
        "  sentence 3",
        "    in views: mono",
    ]


@pytest.mark.slow
def test_turning_split_sentences_off_keeps_the_read_and_why_follows_the_unsplit_line(prefect_harness, tmp_path):
    from flows.cli.why import describe
    from flows.pipelines.ingest import ingest_flow
    from storage.dropped import row_path

    profile, cache = _data(tmp_path), tmp_path / "cache"
    ingest_flow(load_profile(profile, [], cache=cache, environ={}), profile="test")
    off = ingest_flow(load_profile(profile, ["datasets.news.split_sentences=false"], cache=cache, environ={}), profile="test")
    status = {(s["stage"], s["dataset"]): s["status"] for s in off["stages"] if s["dataset"] == "news"}
    assert status == {("read", "news"): "cached", ("duplicates", "news"): "computed", ("clean", "news"): "computed"}
    rows = Catalog(cache).query("SELECT * FROM mono WHERE source = 'news' ORDER BY line")
    # no dataset is split now: the view keeps its `sentence` column, null (issue 26: saved queries keep working)
    assert rows.column_names == [*MONO.names, "sentence"] and rows["sentence"].to_pylist() == [None] * 4
    assert list(zip(rows["line"].to_pylist(), rows["text"].to_pylist())) == list(zip([1, 2, 4, 5], PARAGRAPHS))
    path = row_path(Catalog(cache), "news", 4)
    assert (path.sentences, path.views) == ((), {"mono": 1})  # the split of the run before is not current
    assert describe(path)[2:] == ["  in views: mono"]
