"""Issue 49, bring your configs: `augdag import opusfilter FILE.yaml` prints the ``ingest.clean`` keys of an OpusFilter
configuration (files written here in OpusFilter's format, after its example_configs: ``steps`` of ``type`` and
``parameters``, ``!var`` loops), one line per filter or step it cannot map; `augdag import opustrainer FILE.yaml` a
curriculum's modifiers as a ``robustness`` section. Both print, never run anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conf.errors import ConfError
from conf.importers import import_opusfilter
from conf.sections.cleaning import CleanConf
from conf.sections.filters import ROW_FILTERS
from tests.conftest import subprocess_env

EVERY_FILTER = """\
common:
  output_directory: work
steps:
- type: opus_read
  parameters: {corpus_name: Books, source_language: en, target_language: de, release: latest, preprocessing: raw,
               src_output: books.en.gz, tgt_output: books.de.gz}
- type: remove_duplicates
  parameters:
    inputs: [books.en.gz, books.de.gz]
    outputs: [dedup.en.gz, dedup.de.gz]
- type: filter
  parameters:
    inputs: [dedup.en.gz, dedup.de.gz]
    outputs: [filtered.en.gz, filtered.de.gz]
    filters:
    - LengthFilter: {unit: word, min_length: 1, max_length: 80}
    - LengthRatioFilter: {unit: word, threshold: 3}
    - LongWordFilter: {threshold: 40}
    - AlphabetRatioFilter: {threshold: [0.6, 0.6], exclude_whitespace: true}
    - CharacterScoreFilter: {scripts: [Latin, Latin], thresholds: [0.9, 0.9]}
    - HtmlTagFilter: {}
    - TerminalPunctuationFilter: {threshold: -2}
    - NonZeroNumeralsFilter: {threshold: 0.5}
    - RepetitionFilter: {threshold: 2, min_length: 3, max_length: 100}
    - LanguageIDFilter: {id_method: langid, languages: [en, de], thresholds: [0.3, 0.3]}
    - LMClassifierFilter: {labels: [en, de]}
    - LengthFilter: {unit: char, min_length: 5, max_length: 500}
"""

LOOPED = """\
steps:
- type: filter
  parameters:
    inputs: [!varstr "sv-{lang}.sv.gz", !varstr "sv-{lang}.{lang}.gz"]
    outputs: [!varstr "sv-{lang}.sv.f.gz", !varstr "sv-{lang}.{lang}.f.gz"]
    filters:
    - LinguaFilter:
        languages: [sv, !var lang]
        thresholds: [0, 0]
    - LanguageIDFilter: {id_method: cld2, languages: [sv, !var lang]}
    - LongWordFilter: {threshold: [40, 30]}
  variables:
    lang: [de, en, fr]
- type: remove_duplicates
  parameters: {inputs: [a.gz, b.gz], outputs: [c.gz, d.gz], overlap: [test.sv.gz, test.de.gz]}
"""


def augdag(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], cwd=cwd, env=subprocess_env(cwd), capture_output=True, text=True, timeout=120
    )


def test_import_opusfilter_maps_every_filter_augdag_has_and_names_what_it_cannot_issue_49(tmp_path):
    """Each of the nine row filters, max_ratio and dedup, from their OpusFilter lines; the fragment is a valid
    ``ingest.clean``; the read step, the language-model classifier and a second LengthFilter are one line each."""
    (tmp_path / "of.yaml").write_text(EVERY_FILTER)
    r = augdag(tmp_path, "import", "opusfilter", "of.yaml")
    assert r.returncode == 0, r.stderr
    clean = yaml.safe_load(r.stdout)["ingest"]["clean"]
    assert clean == {
        "dedup": True,
        "length": {"min_length": 1, "max_length": 80, "unit": "word"},
        "max_ratio": 3,
        "long_word": {"threshold": 40},
        "alphabet_ratio": {"threshold": 0.6, "exclude_whitespace": True},
        "character_score": {"threshold": 0.9, "scripts": ["Latin", "Latin"]},
        "html_tags": {},
        "terminal_punctuation": {"threshold": -2},
        "non_zero_numerals": {"threshold": 0.5},
        "repetition": {"threshold": 2, "min_length": 3, "max_length": 100, "unit": "char"},
        "language_id": {"identifier": "py3langid", "threshold": 0.3, "languages": ["en", "de"], "langid_languages": "all"},
    }
    assert set(ROW_FILTERS) <= set(clean)  # every row filter of conf/sections/filters.py
    conf = CleanConf.model_validate(clean)
    assert (conf.length.max_length, conf.language_id.langid_languages, conf.max_ratio) == (80, "all", 3.0)
    lines = r.stdout.splitlines()
    assert "    length: {min_length: 1, max_length: 80, unit: word}  # of.yaml:16: LengthFilter" in lines
    assert "    dedup: true  # of.yaml:7: steps[1] (remove_duplicates)" in lines
    assert [line for line in lines if line.startswith("# ")] == [
        "# note: of.yaml:17: LengthRatioFilter: OpusFilter keeps a ratio < 3, augdag <= max_ratio",
        "# not mapped: of.yaml:4: steps[0] (opus_read): not a filter step; augdag's ingest.clean has no counterpart",
        "# not mapped: of.yaml:26: LMClassifierFilter: no counterpart among augdag's filters (conf/sections/filters.py)",
        "# not mapped: of.yaml:27: LengthFilter: ingest.clean.length is already {'min_length': 1, 'max_length': 80, "
        "'unit': 'word'} from of.yaml:16: LengthFilter",
        "# keys not set here keep augdag's defaults (dedup: true, min_tokens: 1, max_tokens: 250, max_ratio: 1.5)",
    ]


def test_import_opusfilter_reads_looped_steps_and_says_why_a_filter_does_not_map_issue_49(tmp_path):
    """``!var`` languages are left to each dataset's src_lang/tgt_lang (a note); cld2, per-side thresholds that
    differ and an overlap with named files are one line each, with why."""
    path = tmp_path / "looped.yaml"
    path.write_text(LOOPED)
    imported = import_opusfilter(path)
    assert imported.keys == {
        "language_id": {"identifier": "lingua", "threshold": 0, "langid_languages": "all", "lingua_mode": "low"}
    }
    assert imported.notes == [
        f"{path}:7: LinguaFilter: languages [sv, !var lang] vary per step: each bitext's src_lang/tgt_lang names them"
    ]
    assert imported.unmapped == [
        f"{path}:10: LanguageIDFilter: id_method cld2: augdag identifies languages with langid (py3langid) or lingua only",
        f"{path}:11: LongWordFilter: threshold per side is [40, 30]: augdag's filter takes one value for both sides",
        f"{path}:14: steps[1] (remove_duplicates): overlap removes the lines of named files; augdag's decontaminate "
        "compares with the profile's held-out sets: hold the set out (e.g. train_nmt.tests) and set "
        "ingest.clean.decontaminate: {threshold: 1.0}",
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("steps:\n- type: filter\n  parameters: {filters: [\n", "bad.yaml:4: not valid YAML"),
        ("- a\n- b\n", "bad.yaml:1: expected a mapping at the top of the file"),
        ("common: {}\nsteps: {a: 1}\n", "bad.yaml:2: expected `steps:`, a list (an OpusFilter configuration)"),
    ],
)
def test_import_opusfilter_of_a_bad_file_names_its_line_issue_49(tmp_path, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfError) as e:
        import_opusfilter(tmp_path / "bad.yaml")
    assert str(e.value).replace(f"{tmp_path}/", "").startswith(message)


def test_import_opustrainer_prints_its_modifiers_as_a_robustness_section_issue_49(tmp_path):
    """The top-level list, each entry checked (Retokenize has no counterpart: one line); a stage's own list is a line."""
    (tmp_path / "ot.yml").write_text(
        "datasets: {clean: clean.tsv}\nstages: [start, end]\nstart: [clean 1.0, until clean 1]\n"
        "end:\n  mix: [clean 1.0, until clean inf]\n  modifiers:\n  - UpperCase: 0.5\n"
        "modifiers:\n- UpperCase: 0.05\n- Typos: 0.05\n  char_swap: 0.2\n- RemoveEndPunctuation: 0.1\n- Retokenize: 0.1\n"
        "seed: 1111\n"
    )
    r = augdag(tmp_path, "import", "opustrainer", "ot.yml")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout) == {
        "robustness": {
            "seed": 1111,
            "modifiers": [{"UpperCase": 0.05}, {"Typos": 0.05, "char_swap": 0.2}, {"RemoveEndPunct": 0.1}],
        }
    }
    assert [line for line in r.stdout.splitlines() if line.startswith("#")] == [
        "# not mapped: ot.yml:13: unknown modifier 'Retokenize'; expected one of UpperCase, TitleCase, Typos, Tags, Noise, "
        "Merge, Prefix, RemoveEndPunct",
        "# not mapped: ot.yml:7: stage end: its own modifiers apply during that stage only; augdag's robustness section "
        "is one list for the whole bitext: not mapped",
    ]
    bad = augdag(tmp_path, "import", "opustrainer", "missing.yml")
    assert bad.returncode == 2 and bad.stderr.startswith("error: missing.yml: cannot be read as YAML: No such file")
