"""The profile loader: defaults, ``--set``, ``${VAR}``, the cache root, and where each error points."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conf import loader
from conf.errors import ConfError
from conf.loader import SetItem, available_profiles, dump_conf, load_profile, parse_sets
from conf.schema import AugdagConf, DatasetConf


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def conf_error(*args, **kwargs) -> str:
    kwargs.setdefault("environ", {})
    with pytest.raises(ConfError) as info:
        load_profile(*args, **kwargs)
    error = info.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)  # no chained trace
    return str(info.value)


def test_load_profile_empty_file_gives_the_defaults(tmp_path):
    conf = load_profile(write(tmp_path, ""), environ={})
    assert conf == AugdagConf()
    assert (conf.cache, conf.shard_size, conf.pipelines, conf.ingest.clean.max_ratio) == (
        Path(".augdag"),
        100_000,
        ["ingest"],
        1.5,
    )
    assert dump_conf(conf) == AugdagConf().model_dump(mode="json")
    assert dump_conf(conf)["cache"] == ".augdag"


def test_load_profile_comments_only_file_gives_the_defaults(tmp_path):
    assert load_profile(write(tmp_path, "# nothing here\n"), environ={}) == AugdagConf()


def test_parse_sets_parses_values_as_yaml():
    assert parse_sets(["a.b=3", "c=true", "d=[x, y]", "e=x", "f=1.5", "g=", "h=a=b"]) == [
        SetItem("a.b", 3, "a.b=3"),
        SetItem("c", True, "c=true"),
        SetItem("d", ["x", "y"], "d=[x, y]"),
        SetItem("e", "x", "e=x"),
        SetItem("f", 1.5, "f=1.5"),
        SetItem("g", None, "g="),
        SetItem("h", "a=b", "h=a=b"),
    ]


def test_load_profile_set_coerces_int_bool_list_and_nests(tmp_path):
    path = write(
        tmp_path,
        """
        shard_size: 10
        ingest:
          clean:
            dedup: true
        """,
    )
    conf = load_profile(
        path,
        [
            "shard_size=3",
            "ingest.clean.dedup=false",
            "ingest.clean.max_ratio=2",
            "pipelines=[ingest]",
            "task_runner.max_workers=4",
            "datasets.d1.kind=mono",
            "datasets.d1.format=text",
            "datasets.d1.path=m.txt",
        ],
        environ={},
    )
    assert (conf.shard_size, conf.ingest.clean.dedup, conf.ingest.clean.max_ratio) == (3, False, 2.0)
    assert (conf.pipelines, conf.task_runner.max_workers, conf.ingest.clean.max_tokens) == (["ingest"], 4, 250)
    assert conf.datasets == {"d1": DatasetConf(kind="mono", format="text", path=Path("m.txt"))}


def test_load_profile_later_set_wins(tmp_path):
    conf = load_profile(write(tmp_path, ""), ["shard_size=3", "shard_size=7"], environ={})
    assert conf.shard_size == 7


@pytest.mark.parametrize(
    "in_profile, env, cli, expected",
    [
        (False, None, None, ".augdag"),
        (True, None, None, "from_profile"),
        (True, "from_env", None, "from_env"),
        (False, "from_env", None, "from_env"),
        (True, "from_env", Path("from_cli"), "from_cli"),
        (True, None, Path("from_cli"), "from_cli"),
        (True, "", None, "from_profile"),
    ],
)
def test_load_profile_cache_cli_beats_env_beats_profile_beats_default(tmp_path, in_profile, env, cli, expected):
    path = write(tmp_path, "cache: from_profile\n" if in_profile else "")
    environ = {} if env is None else {"AUGDAG_CACHE": env}
    assert load_profile(path, cache=cli, environ=environ).cache == Path(expected)


def test_load_profile_cache_from_set_counts_as_the_profile(tmp_path):
    assert load_profile(write(tmp_path, ""), ["cache=from_set"], environ={}).cache == Path("from_set")


def test_load_profile_interpolates_env_with_default_and_dollar_escape(tmp_path):
    path = write(
        tmp_path,
        """
        shard_size: ${N}
        cache: ${ROOT:-/tmp/default}/c$$1
        datasets:
          d1: {kind: mono, format: text, path: "${DATA}/m-${EMPTY:-x}.txt"}
        demo:
          seed: ${SEED:-7}
        """,
    )
    conf = load_profile(path, environ={"N": "5", "DATA": "/data", "EMPTY": ""})
    assert (conf.shard_size, conf.cache, conf.demo.seed) == (5, Path("/tmp/default/c$1"), 7)
    assert conf.datasets["d1"].path == Path("/data/m-x.txt")
    assert load_profile(path, environ={"N": "5", "DATA": "/d", "ROOT": "/r"}).cache == Path("/r/c$1")


def test_load_profile_set_values_are_not_interpolated(tmp_path):
    assert load_profile(write(tmp_path, ""), ["cache=${X}"], environ={}).cache == Path("${X}")


def test_load_profile_undefined_env_names_file_line_key_and_variable(tmp_path):
    path = write(
        tmp_path,
        """
        demo:
          seed: 1
          bitext_rows: ${ROWS}
        """,
    )
    assert conf_error(path) == (
        f"{path}:3: demo.bitext_rows: environment variable ROWS is not set (use ${{ROWS:-default}} for a default)"
    )


def test_load_profile_malformed_interpolation_is_refused(tmp_path):
    path = write(tmp_path, "cache: ${1X}\n")
    assert conf_error(path) == (
        f"{path}:1: cache: malformed '${{1X}}', expected ${{VAR}} or ${{VAR:-default}} (write $$ for a literal $)"
    )


def test_load_profile_unknown_top_level_key_lists_the_allowed_keys(tmp_path):
    path = write(
        tmp_path,
        """
        shard_size: 5
        shard_sise: 6
        """,
    )
    assert conf_error(path) == (
        f"{path}:2: shard_sise: unknown key; did you mean 'shard_size'? expected one of: "
        "cache, shard_size, storage, task_runner, orchestration, datasets, pipelines, ingest, heldout, self_training, "
        "rejuvenation, train_nmt, paraphrase, train_classifier, epida, c2c, mt_paraphrase, robustness, train_slot_tagger, "
        "nightly, demo"
    )


def test_load_profile_unknown_key_in_a_dataset_names_its_dotted_key(tmp_path):
    path = write(
        tmp_path,
        """
        datasets:
          d1:
            kind: mono
            format: text
            path: m.txt
            colums: [text]
        """,
    )
    assert conf_error(path) == (
        f"{path}:6: datasets.d1.colums: unknown key; did you mean 'columns'? expected one of: "
        "kind, format, path, src, tgt, columns, rename, header, split, encoding, on_decode_error, split_sentences, "
        "language, src_lang, tgt_lang, clean"
    )


def test_load_profile_wrong_type_names_file_line_key_and_value(tmp_path):
    path = write(
        tmp_path,
        """
        # sizes
        shard_size: many
        """,
    )
    assert conf_error(path) == (
        f"{path}:2: shard_size: Input should be a valid integer, unable to parse string as an integer, found 'many'"
    )


def test_load_profile_out_of_range_names_the_bound(tmp_path):
    path = write(tmp_path, "ingest:\n  clean:\n    max_ratio: 0.5\n")
    assert conf_error(path) == (f"{path}:3: ingest.clean.max_ratio: Input should be greater than or equal to 1, found 0.5")


def test_load_profile_missing_dataset_kind_names_the_parent_line(tmp_path):
    path = write(
        tmp_path,
        """
        datasets:
          d1:
            format: text
            path: m.txt
        """,
    )
    assert conf_error(path) == f"{path}:2: datasets.d1.kind: missing required key"


def test_load_profile_lists_every_error_one_per_line(tmp_path):
    path = write(
        tmp_path,
        """
        shard_size: 0
        pipelines: [ingest, rejuvenate]
        task_runner: {kind: mpi}
        """,
    )
    assert conf_error(path).splitlines() == [
        f"{path}:1: shard_size: Input should be greater than or equal to 1, found 0",
        f"{path}:3: task_runner.kind: Input should be 'threads', 'processes', 'dask' or 'ray', found 'mpi'",
        # the registered ones (flows/engine/registry.py)
        f"{path}:2: pipelines.1: unknown pipeline; expected one of ingest, self_training, rejuvenation, paraphrase, "
        "mt_paraphrase, robustness, train_nmt, epida, train_classifier, c2c, train_slot_tagger, found 'rejuvenate'",
    ]


def test_load_profile_bitext_text_with_path_gets_the_validator_message(tmp_path):
    path = write(
        tmp_path,
        """
        datasets:
          wmt:
            kind: bitext
            format: text
            path: wmt.txt
        """,
    )
    assert conf_error(path) == (
        f"{path}:2: datasets.wmt: a bitext in format 'text' needs `src` and `tgt` (two line-aligned files), not `path`"
    )


def test_load_profile_bad_set_value_names_the_set(tmp_path):
    path = write(tmp_path, "shard_size: 5\n")
    assert conf_error(path, ["shard_size=many"]) == (
        "--set shard_size=many: shard_size: Input should be a valid integer, unable to parse string as an integer, found 'many'"
    )


def test_load_profile_dataset_made_by_set_names_the_set_for_a_missing_key(tmp_path):
    assert conf_error(write(tmp_path, ""), ["datasets.d9.kind=mono"]) == (
        "--set datasets.d9.kind=mono: datasets.d9.format: missing required key"
    )


@pytest.mark.parametrize("text", ["abc", "=3", "a..b=3", "a b=3"])
def test_parse_sets_refuses_a_malformed_entry(text):
    with pytest.raises(ConfError) as info:
        parse_sets([text])
    assert str(info.value) == f"--set {text!r}: expected KEY=VALUE with a dotted KEY, e.g. ingest.clean.max_ratio=2"


def test_load_profile_set_through_a_scalar_is_refused(tmp_path):
    assert conf_error(write(tmp_path, "shard_size: 5\n"), ["shard_size.x=1"]) == (
        "--set shard_size.x=1: shard_size is 5, not a mapping; set shard_size as a whole instead"
    )


def test_load_profile_missing_file_names_the_path(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "PROFILES_DIR", tmp_path)
    write(tmp_path, "", "demo.yaml"), write(tmp_path, "", "ingest.yaml")
    missing = tmp_path / "nope" / "nightly.yaml"
    assert conf_error(missing) == (
        f"{missing}: no such profile file. Hint: give a path to a YAML file or a packaged profile: demo, ingest"
    )
    assert conf_error("nightly") == (
        f"nightly: no such profile file, nor a packaged profile {tmp_path / 'nightly.yaml'}. "
        "Hint: give a path to a YAML file or a packaged profile: demo, ingest"
    )


def test_load_profile_finds_a_packaged_profile_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "PROFILES_DIR", tmp_path)
    write(tmp_path, "shard_size: 42\n", "ingest.yaml")
    assert available_profiles() == ["ingest"]
    assert load_profile("ingest", environ={}).shard_size == 42
    assert load_profile("ingest.yaml", environ={}).shard_size == 42


def test_load_profile_file_path_beats_the_packaged_name(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "PROFILES_DIR", tmp_path / "packaged")
    (tmp_path / "packaged").mkdir()
    write(tmp_path / "packaged", "shard_size: 1\n", "demo.yaml")
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "shard_size: 2\n", "demo")
    assert load_profile("demo", environ={}).shard_size == 2


def test_load_profile_yaml_syntax_error_names_the_line(tmp_path):
    path = write(
        tmp_path,
        """
        shard_size: 5
        pipelines: [ingest
        demo: {}
        """,
    )
    assert conf_error(path) == (
        f"{path}:3: YAML syntax error: expected ',' or ']', but got ':' (while parsing a flow sequence at line 2)"
    )


def test_load_profile_top_level_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "- ingest\n")
    assert conf_error(path) == f"{path}:1: expected a mapping at the top level, found a sequence"


def test_load_profile_duplicate_key_is_refused(tmp_path):
    path = write(
        tmp_path,
        """
        demo:
          seed: 1
          seed: 2
        """,
    )
    assert conf_error(path) == f"{path}:3: demo.seed: duplicate key (first at line 2)"


def test_self_training_names_datasets_of_the_right_kind(tmp_path):
    path = write(
        tmp_path,
        """
        pipelines: [self_training]
        datasets:
          pairs: {kind: bitext, format: tsv, path: p.tsv}
          lines: {kind: mono, format: text, path: m.txt}
        self_training:
          mono: [pairs]
        """,
    )
    assert conf_error(path) == (
        f"{path}:6: self_training.mono: dataset 'pairs' must be of kind 'mono', found kind 'bitext'; mono datasets: ['lines']"
    )  # the line of the key, and what it could name (issue 26)
    ok = write(
        tmp_path,
        """
        pipelines: [self_training]
        datasets:
          pairs: {kind: bitext, format: tsv, path: p.tsv}
          lines: {kind: mono, format: text, path: m.txt}
        self_training:
          sampling: {budget: 10, beta: 3}
          tokenizer: {kind: moses, src_lang: en, tgt_lang: de}
        """,
        "ok.yaml",
    )
    conf = load_profile(ok, environ={})
    assert conf.self_training_datasets() == ("pairs", ["lines"])
    assert (conf.self_training.sampling.budget, conf.self_training.sampling.beta, conf.self_training.sampling.percentile_r) == (
        10,
        3.0,
        90.0,
    )
