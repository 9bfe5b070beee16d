"""Word tokenisation for self-training (issue 18, item 3): exact tokens per tokeniser and language, the
`tokenize` stage, the conf, and the pipeline on raw text giving what it gives on pre-tokenised text."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import ValidationError

from conf.errors import InputError
from conf.loader import load_profile
from conf.sections.tokenizer import DEFAULT_PATTERN, TokenizerConf
from demo import write_demo
from models.lexicon import tokenize
from models.word_tokenizer import word_tokenize
from storage.catalog import Catalog
from tasks.self_training.tokenize import tokenize_columns
from tests.conftest import REPO


def _moses(lang: str, *texts: str, **kw) -> list[str]:
    return word_tokenize(pa.array(texts), kind="moses", lang=lang, **kw).to_pylist()


def test_moses_english_punctuation_quotes_hyphens_numbers_and_clitics():
    assert _moses("en", 'He said, "Don\'t go!" It costs $3.50 (well-known), e-mail 1,000.5 U.S. people.') == [
        'He said , " Don \'t go ! " It costs $ 3.50 ( well-known ) , e-mail 1,000.5 U.S. people .'
    ]
    assert _moses("en", "Mr. Smith's dog barked at 5 p.m.") == ["Mr. Smith 's dog barked at 5 p.m."]
    # -a: inner hyphens become tokens of their own, marked as Moses marks them
    assert _moses("en", "a well-known e-mail", aggressive_dash_splits=True) == ["a well @-@ known e @-@ mail"]
    # no XML escaping: a token is the text's own characters ("&", "<", "'" stay themselves); single quotes
    # are Moses' English apostrophe rule: split before a letter only, so a closing one stays attached
    assert _moses("en", "Tom & Jerry <3 'quoted'") == ["Tom & Jerry < 3 ' quoted'"]


def test_moses_german_and_french_use_their_own_rules():
    # German: "z.B." is an abbreviation and "3." an ordinal (non-breaking prefixes of de)
    assert _moses("de", "Das ist z.B. der 3. Mann, oder?") == ["Das ist z.B. der 3. Mann , oder ?"]
    assert _moses("de", "„Gut“, sagte sie.") == ["„ Gut “ , sagte sie ."]
    # French: the elided article keeps its apostrophe, split from the word it precedes
    assert _moses("fr", "L'homme qu'il a vu coûte 12,5 €.") == ["L' homme qu' il a vu coûte 12,5 € ."]


def test_regex_and_whitespace_tokens_and_empty_and_null_rows():
    texts = pa.array(["It costs $3.50 (well-known), don't!", "  a \t b  ", "", None])
    assert word_tokenize(texts, kind="regex", pattern=DEFAULT_PATTERN).to_pylist() == [
        "It costs $ 3.50 ( well-known ) , don't !",
        "a b",
        "",
        None,
    ]
    assert word_tokenize(texts, kind="whitespace").to_pylist() == ["It costs $3.50 (well-known), don't!", "a b", "", None]
    # a pattern with capturing groups still yields whole matches
    assert word_tokenize(pa.array(["ab-cd ef"]), kind="regex", pattern=r"(\w+)(-\w+)?").to_pylist() == ["ab-cd ef"]


def test_tokenize_stage_replaces_only_the_named_columns():
    rows = pa.table(
        {
            "uid": ["u1", "u2"],
            "src": ["Hello, world!", "Fine."],
            "tgt": ["Hallo, Welt!", None],
            "source": ["d", "d"],
            "line": [1, 2],
        }
    )
    out = tokenize_columns(rows, langs={"src": "en", "tgt": "de"})
    assert out.schema == rows.schema
    assert out.to_pydict() == {
        "uid": ["u1", "u2"],
        "src": ["Hello , world !", "Fine ."],
        "tgt": ["Hallo , Welt !", None],
        "source": ["d", "d"],
        "line": [1, 2],
    }
    with pytest.raises(InputError, match=r"no column 'text' to tokenise"):
        tokenize_columns(rows, langs={"text": "en"})


def test_tokenizer_conf_defaults_and_errors():
    conf = TokenizerConf()
    assert (conf.kind, conf.src_lang, conf.tgt_lang, conf.aggressive_dash_splits) == ("moses", None, None, False)
    with pytest.raises(ValidationError, match="not a Python regular expression"):
        TokenizerConf(kind="regex", pattern="(unclosed")
    with pytest.raises(ValidationError, match="matches the empty string"):
        TokenizerConf(kind="regex", pattern=r"\w*")
    with pytest.raises(ValidationError, match="src_lang"):
        TokenizerConf(src_lang="English")


# ---- the pipeline: raw text through moses == the same text pre-tokenised, through whitespace --------------


def _detokenized(tokens: list[str], i: int) -> str:
    """A raw sentence: capitalised, a comma after the second word of every third row, a full stop (a
    question mark for every fourth) attached to the last word: "Lukas, smiles."."""
    words = list(tokens)
    words[0] = words[0].capitalize()
    if i % 3 == 0 and len(words) > 2:
        words[1] += ","
    words[-1] += "?" if i % 4 == 0 else "."
    return " ".join(words)


def _pretokenized(tokens: list[str], i: int) -> str:
    """The same sentence as Moses tokenises it: punctuation a token of its own."""
    return _detokenized(tokens, i).replace(",", " ,").replace(".", " .").replace("?", " ?")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """The demo grammar's bitext and mono, written raw (raw/) and pre-tokenised (tok/), line for line."""
    demo = tmp_path_factory.mktemp("tok-demo")
    write_demo(demo, seed=3, bitext_rows=600, mono_rows=300, labeled_rows=10, slots_rows=10, bad_rows=False)
    out = {}
    for kind, shape in (("raw", _detokenized), ("tok", _pretokenized)):
        root = tmp_path_factory.mktemp(kind)
        for name in ("train.en", "train.de", "mono.en"):
            lines = (demo / name).read_text(encoding="utf-8").splitlines()
            (root / name).write_text("".join(shape(line.split(), i) + "\n" for i, line in enumerate(lines)), encoding="utf-8")
        for name in ("test.en", "test.de", "labeled_test.tsv", "slots_small_test.jsonl"):  # the held-out sets, as they are:
            (root / name).write_bytes((demo / name).read_bytes())  # the teacher's input is checked against them
        out[kind] = root
    raw, tok = ((out[k] / "train.en").read_text().splitlines() for k in ("raw", "tok"))
    assert word_tokenize(pa.array(raw), kind="moses", lang="en").to_pylist() == tok  # the premise, checked
    return out


def test_moses_takes_each_sides_language_from_the_profile_and_needs_both():
    """The German side gets German rules ("3." an ordinal, kept whole), the English side English ones (split)."""
    rows = pa.table({"uid": ["a"], "src": ["Am 3. Oktober kam er."], "tgt": ["Am 3. Oktober kam er."]})  # the same
    langs = TokenizerConf(kind="moses", src_lang="en", tgt_lang="de").languages()
    out = tokenize_columns(rows, langs={"src": langs["src"], "tgt": langs["tgt"]})
    assert out.to_pydict() == {"uid": ["a"], "src": ["Am 3 . Oktober kam er ."], "tgt": ["Am 3. Oktober kam er ."]}
    for conf, missing in [(TokenizerConf(kind="moses"), "src_lang"), (TokenizerConf(src_lang="fr"), "tgt_lang")]:
        with pytest.raises(ValueError, match=rf"^self_training\.tokenizer\.{missing}: kind moses needs the language"):
            conf.languages()
    assert TokenizerConf(kind="regex").languages() == {"src": "en", "tgt": "en"}  # unused; as before: caches stand


def test_moses_without_languages_is_one_line_exit_2_before_any_stage(tmp_path):
    """The profile check refuses it when the profile loads: `tgt_lang` used to default to `en`, so German was
    tokenised with English rules without a word."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    profile = tmp_path / "p.yaml"
    profile.write_text(
        "pipelines: [ingest, self_training]\ndatasets:\n"
        "  pair: {kind: bitext, format: text, src: a.en, tgt: a.de}\n"
        "  mono: {kind: mono, format: text, path: m.en}\n"
        "self_training:\n  tokenizer: {kind: moses, src_lang: en}\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "--cache", str(tmp_path / "c"), "run", "self_training", "--config", str(profile)],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path),
        cwd=tmp_path,
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: {profile}:6: self_training.tokenizer.tgt_lang: kind moses needs the language of "
        "each side (its rules differ per language); expected e.g. {kind: moses, src_lang: en, "
        "tgt_lang: de}\n"
    )
    assert not (tmp_path / "c").exists()


def _first_half(cache, data, tokenizer: str) -> Catalog:
    from prefect import flow

    from flows.engine.driver import Run
    from flows.engine.runners import run_flow
    from flows.pipelines.self_training import sample_monolingual

    conf = load_profile(
        REPO / "conf" / "demo.yaml",
        [
            "shard_size=200",
            "ingest.clean.max_ratio=10",  # the ratio counts whitespace tokens: raw and tokenised differ
            "datasets.demo_bitext.clean={}",  # the demo's corpus filters off: punctuation (terminal_punctuation) and
            # the test set decontaminate compares with differ between raw and tokenised text, or are not written here
            "heldout.allow_overlap=[demo_test]",  # so the 3 training pairs that repeat test pairs stay: allowed by name
            f"self_training.tokenizer.kind={tokenizer}",
            "self_training.tokenizer.src_lang=en",
            "self_training.tokenizer.tgt_lang=de",
            f"datasets.demo_bitext.src={data}/train.en",
            f"datasets.demo_bitext.tgt={data}/train.de",
            f"datasets.demo_mono.path={data}/mono.en",
        ],
        cache=cache,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )

    @flow(name="tokenized_sampling")
    def sampling(conf):
        with Run.started(conf, pipeline="tokenized_sampling", profile="test", config=None) as run:
            sample_monolingual(run, conf)
        return run.finish()

    summary = run_flow(sampling, conf)
    assert summary["status"] == "completed"
    return Catalog(cache)


@pytest.mark.slow
def test_alignment_and_entropy_on_raw_text_through_moses_equal_the_pretokenized_ones(prefect_harness, corpora, tmp_path):
    moses = _first_half(tmp_path / "moses", corpora["raw"], "moses")
    pre = _first_half(tmp_path / "pre", corpora["tok"], "whitespace")
    by_line = "SELECT line, links, src_tokens, tgt_tokens, coverage FROM alignments ORDER BY line"
    links = moses.query(by_line)
    assert links.num_rows > 550 and links.equals(pre.query(by_line))  # 600 less the duplicates clean drops
    words = "SELECT src, H, freq FROM word_uncertainty ORDER BY src"
    assert moses.query(words).equals(pre.query(words))  # the same tokens through the same code: bit-identical
    scores = "SELECT source, line, tokens, uncertainty FROM uncertainty ORDER BY source, line"
    assert moses.query(scores).equals(pre.query(scores))
    # the views keep the text as it came: the sample shows raw sentences, punctuation attached
    sample = moses.query("SELECT s.text, m.text AS mono FROM sampled_mono s JOIN mono m USING (uid)").to_pylist()
    assert sample and all(r["text"] == r["mono"] and r["text"][-1] in ".?" and r["text"][-2] != " " for r in sample)
    stages = moses.query("SELECT DISTINCT stage FROM artifacts WHERE stage = 'tokenize'").num_rows
    assert stages == 1 and pre.query("SELECT * FROM artifacts WHERE stage = 'tokenize'").num_rows == 0


def test_whitespace_on_raw_text_inflates_the_vocabulary(corpora):
    """What moses is for: on raw text, "smiles." and "smiles" are two words to the lexicon."""
    raw = pa.array((corpora["raw"] / "train.en").read_text().splitlines())
    vocab = {
        kind: len(set(tokenize(word_tokenize(raw, kind=kind, lang="en")).flatten().to_pylist()))
        for kind in ("whitespace", "moses")
    }
    tok = pa.array((corpora["tok"] / "train.en").read_text().splitlines())
    assert vocab["moses"] == len(set(tokenize(tok).flatten().to_pylist()))
    assert vocab["whitespace"] > 1.3 * vocab["moses"]


@pytest.mark.slow
def test_the_teachers_half_tokenises_the_synthetic_pairs_for_the_target_lm_and_force_alignment(
    prefect_harness, corpora, tmp_path
):
    """With moses, the synthetic pairs reach the target-side LM filter and the force alignment tokenised,
    while the `synthetic` view keeps the sentences and translations as they are."""
    from flows.pipelines.self_training import self_training_flow

    data = corpora["raw"]
    conf = load_profile(
        REPO / "conf" / "demo.yaml",
        [
            "shard_size=200",
            "self_training.tokenizer.kind=moses",
            "self_training.tokenizer.src_lang=en",
            "self_training.tokenizer.tgt_lang=de",
            "self_training.teacher.train.max_update=10",
            "self_training.teacher.min_bleu=0",  # a 10-update teacher: no gate
            "self_training.filter.lm_drop=0.2",
            "self_training.filter.max_ratio=100",  # a teacher of 10 updates: keep its translations of any length
            "datasets.demo_bitext.clean={}",  # the demo's corpus filters off, decontaminate too:
            "heldout.allow_overlap=[demo_test]",  # the 3 training pairs that repeat test pairs stay, allowed by name
            f"datasets.demo_bitext.src={data}/train.en",
            f"datasets.demo_bitext.tgt={data}/train.de",
            f"datasets.demo_mono.path={data}/mono.en",
        ],
        cache=tmp_path,
        environ={"AUGDAG_DEMO_DATA": str(data)},
    )
    summary = self_training_flow(conf, profile="test")
    assert summary["status"] == "completed"
    cat = Catalog(tmp_path)
    # bitext (src, tgt), mono (text), the kept synthetic pairs' targets (LM), the synthetic pairs (force alignment)
    tokenized = cat.query("SELECT dataset, rows FROM artifacts WHERE stage = 'tokenize' ORDER BY dataset, rows")
    assert tokenized.num_rows == 4
    lm_dropped = cat.query("SELECT count(*) AS n FROM dropped WHERE reason = 'lm_score'")["n"][0].as_py()
    synthetic = cat.query("SELECT s.src, m.text FROM synthetic s JOIN sampled_mono m ON s.parent_uid = m.uid").to_pylist()
    assert synthetic and lm_dropped > 0 and all(r["src"] == r["text"] and r["src"][-2] != " " for r in synthetic)
    coverage = cat.query("SELECT coverage FROM uncertainty_bins WHERE source = 'demo_mono'")["coverage"].to_pylist()
    assert any(c is not None and 0 < c <= 1 for c in coverage)  # force-aligned through the tokenised pairs
