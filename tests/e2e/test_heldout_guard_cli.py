"""No training input holds a held-out line, through the CLI (issue 47, defects 1 and 7), in `make test-e2e` (three
nights, ~100 CPU-s): a minimal `[ingest, train_nmt]` profile's first night, and a classifier's and a slot tagger's
training sets; the rules are tests/pipelines/test_heldout_guard.py."""

from __future__ import annotations

import json

from tests.conftest import augdag


def _profile(tmp_path, data, *, path: bool = True) -> str:
    """The minimal `[ingest, train_nmt]` profile: its path (written), or with ``path=False`` its text."""
    text = f"""shard_size: 200
pipelines: [ingest, train_nmt]
datasets:
  demo_bitext: {{kind: bitext, format: text, src: {data}/train.en, tgt: {data}/train.de}}
  demo_test: {{kind: bitext, format: text, src: {data}/test.en, tgt: {data}/test.de}}
train_nmt:
  tests: [demo_test]
  mix: {{all: "SELECT src, tgt FROM bitext"}}
  student: {{threads: 1, train: {{max_update: 4, warmup_updates: 2}}}}
"""
    if not path:
        return text
    profile = tmp_path / "minimal.yaml"
    profile.write_text(text)
    return str(profile)


def test_a_minimal_profiles_first_night_never_trains_on_the_test_set_issue_47(tmp_path):
    """`SELECT src, tgt FROM bitext` with a held-out set: the test pairs are not in `bitext`; the demo's planted
    copies of test pairs (capitalised, a full stop: equal after normalising) fail the first night before any
    training, naming the mix, the set and the count; allowed by name, the night trains, with a warning."""
    from demo import write_demo

    data = tmp_path / "data"
    write_demo(data, seed=3, bitext_rows=300, mono_rows=10, labeled_rows=10, slots_rows=10, test_rows=40)
    cache, profile = tmp_path / "cache", _profile(tmp_path, data)

    first = augdag(tmp_path, "nightly", "--config", profile, "--cache", str(cache))
    assert first.returncode == 1, first.stdout + first.stderr
    out = " ".join((first.stdout + first.stderr).split())
    overlap = json.loads(
        augdag(
            tmp_path,
            "sql",
            "SELECT count(*) AS n, count(DISTINCT heldout_line) AS lines FROM heldout_overlap",
            "--cache",
            str(cache),
            "-f",
            "json",
        ).stdout
    )
    assert overlap["n"] > 0
    assert f"train_nmt.mix overlaps the held-out set 'demo_test' ({overlap['n']} distinct rows)" in out
    assert "heldout.allow_overlap: [demo_test]" in out
    models = augdag(tmp_path, "sql", "SELECT count(*) AS n FROM models", "--cache", str(cache), "-f", "json")
    assert json.loads(models.stdout) == {"n": 0}  # nothing trained

    counts = json.loads(
        augdag(
            tmp_path,
            "sql",
            "SELECT (SELECT count(*) FROM bitext WHERE source = 'demo_test') AS test_in_bitext, "
            "(SELECT count(*) FROM heldout_bitext WHERE source = 'demo_test') AS heldout",
            "--cache",
            str(cache),
            "-f",
            "json",
        ).stdout
    )
    assert counts == {"test_in_bitext": 0, "heldout": 40}

    second = augdag(tmp_path, "nightly", "--config", profile, "--cache", str(cache), "--set", "heldout.allow_overlap=[demo_test]")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "allowed by heldout.allow_overlap" in second.stdout + second.stderr
    mixed = json.loads(
        augdag(
            tmp_path,
            "sql",
            "SELECT count(*) AS rows, count(*) FILTER (WHERE (src, tgt) IN (SELECT (src, tgt) FROM heldout_bitext)) "
            "AS test_pairs FROM training_mix",
            "--cache",
            str(cache),
            "-f",
            "json",
        ).stdout
    )
    assert mixed["test_pairs"] == 0 and mixed["rows"] > 0

    # heldout.on_overlap: drop: the night trains on the mix without those rows, each one a `dropped` row
    third = augdag(tmp_path, "nightly", "--config", profile, "--cache", str(cache), "--set", "heldout.on_overlap=drop")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "left out with their copies (heldout.on_overlap: drop" in " ".join((third.stdout + third.stderr).split())
    after = json.loads(
        augdag(
            tmp_path,
            "sql",
            "SELECT (SELECT count(*) FROM training_mix) AS rows, (SELECT count(*) FROM dropped WHERE stage = "
            "'training_mix' AND reason = 'test_overlap' AND detail LIKE 'demo_test line %') AS dropped",
            "--cache",
            str(cache),
            "-f",
            "json",
        ).stdout
    )
    assert after == {"rows": mixed["rows"] - overlap["n"], "dropped": overlap["n"]}


def test_a_classifier_or_tagger_training_set_holding_test_lines_fails_before_training_issue_47(tmp_path):
    """Two training rows repeat test lines (one re-cased with a full stop, one equal): both learners fail before any
    model trains, each naming its input and the held-out sets it reaches with their counts (a text is compared with
    every held-out set, whatever its kind); `heldout_overlap` lists the pairs."""
    words = ["red", "green", "blue", "black", "white", "brown", "grey", "pink"]
    train = [f"the {a} cat sees a {b} dog" for a in words for b in words[:3]]
    test = ["the red cat sees a green dog", "a small bird sings", "The white cat sees a blue dog"]
    (tmp_path / "train.tsv").write_text("".join(f"animal\t{t}\n" for t in train))
    (tmp_path / "test.tsv").write_text("".join(f"animal\t{t.capitalize()}.\n" for t in test))
    tagged = lambda t: json.dumps({"tokens": t.split(), "tags": ["O"] * (len(t.split()) - 1) + ["B-animal"]})  # noqa: E731
    (tmp_path / "strain.jsonl").write_text("".join(tagged(t) + "\n" for t in train))
    (tmp_path / "stest.jsonl").write_text("".join(tagged(t) + "\n" for t in test))
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"""pipelines: [ingest, train_classifier, train_slot_tagger]
datasets:
  train: {{kind: labeled, format: tsv, path: {tmp_path}/train.tsv, columns: [label, text]}}
  test: {{kind: labeled, format: tsv, path: {tmp_path}/test.tsv, columns: [label, text]}}
  strain: {{kind: slots, format: jsonl, path: {tmp_path}/strain.jsonl}}
  stest: {{kind: slots, format: jsonl, path: {tmp_path}/stest.jsonl}}
train_classifier: {{dataset: train, test: test, augmentation: [none]}}
train_slot_tagger: {{dataset: strain, test: stest, arms: [original]}}
"""
    )
    cache = tmp_path / "cache"
    run = augdag(tmp_path, "nightly", "--config", str(profile), "--cache", str(cache))
    assert run.returncode == 1, run.stdout + run.stderr
    out = " ".join((run.stdout + run.stderr).split())
    sets = "sets 'stest' (2 distinct rows), 'test' (2 distinct rows)"
    assert f"train_classifier failed: ConfError: train_classifier.dataset overlaps the held-out {sets} (equal after " in out
    assert f"train_slot_tagger failed: ConfError: train_slot_tagger.arms.original overlaps the held-out {sets} (equal" in out
    listed = augdag(
        tmp_path,
        "sql",
        "SELECT input, heldout, heldout_line, text FROM heldout_overlap ORDER BY ALL",
        "--cache",
        str(cache),
        "-f",
        "json",
    )
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [
        {"input": key, "heldout": test_set, "heldout_line": line, "text": text}
        for key in ("train_classifier.dataset", "train_slot_tagger.arms.original")
        for test_set in ("stest", "test")
        for line, text in ((1, "the red cat sees a green dog"), (3, "the white cat sees a blue dog"))
    ]
    assert json.loads(
        augdag(tmp_path, "sql", "SELECT count(*) AS n FROM models", "--cache", str(cache), "-f", "json").stdout
    ) == {"n": 0}


def test_a_teacher_or_identification_model_never_learns_a_test_pair_issue_47(tmp_path):
    """Self-training's teacher and rejuvenation's identification model train on their bitext as it is: with the
    demo's planted copies of test pairs (no decontaminate here) both pipelines fail before any model trains, each
    naming its input, the set and the count; train_nmt, which reads them, is skipped."""
    from demo import write_demo

    data = tmp_path / "data"
    write_demo(data, seed=3, bitext_rows=300, mono_rows=10, labeled_rows=10, slots_rows=10, test_rows=40)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        _profile(tmp_path, data, path=False)
        .replace("pipelines: [ingest, train_nmt]", "pipelines: [ingest, self_training, rejuvenation, train_nmt]")
        .replace("datasets:\n", f"datasets:\n  demo_mono: {{kind: mono, format: text, path: {data}/mono.en}}\n")
        + """self_training: {bitext: demo_bitext, mono: [demo_mono], tokenizer: {kind: moses, src_lang: en, tgt_lang: de}}
rejuvenation: {bitext: demo_bitext}
"""
    )
    cache = tmp_path / "cache"
    run = augdag(tmp_path, "nightly", "--config", str(profile), "--cache", str(cache))
    assert run.returncode == 1, run.stdout + run.stderr
    out = " ".join((run.stdout + run.stderr).split())
    n = json.loads(
        augdag(
            tmp_path,
            "sql",
            "SELECT count(DISTINCT row) AS n FROM heldout_overlap WHERE input = 'self_training.bitext'",
            "--cache",
            str(cache),
            "-f",
            "json",
        ).stdout
    )["n"]
    assert n > 0
    for key in ("self_training.bitext", "rejuvenation.bitext"):
        assert f"{key} overlaps the held-out set 'demo_test' ({n} distinct rows)" in out, out
    models = augdag(tmp_path, "sql", "SELECT count(*) AS n FROM models", "--cache", str(cache), "-f", "json")
    assert json.loads(models.stdout) == {"n": 0}  # nothing trained
