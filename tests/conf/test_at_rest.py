"""What is stored of a profile (issue 48, defect 4): a value read from the environment as its ``${VAR}``, resolved
again by the process that reads the record; a recursive YAML alias refused in one line (defect 7; the alias bomb
through the CLI: tests/e2e/test_config_at_rest.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conf.at_rest import redact
from conf.errors import ConfError
from conf.loader import dump_conf, load_profile, load_recorded

SECRET = "at-rest-marker-5d1c0e"  # an environment value no other test uses (the notes are per process)


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


PROFILE = """
datasets:
  pairs:
    kind: bitext
    format: text
    src: ${DATA_DIR}/train.en
    tgt: ${REL_DIR}/train.de
task_runner:
  kind: threads
  address: tcp://user:${TOKEN}@scheduler:8786/$${NOT_A_VARIABLE}
"""


def test_dump_conf_stores_the_written_form_and_load_recorded_resolves_it_again(tmp_path):
    env = {"DATA_DIR": f"/data/{SECRET}", "REL_DIR": "rel", "TOKEN": SECRET + "-token"}
    conf = load_profile(write(tmp_path, PROFILE), environ=env)
    assert (str(conf.datasets["pairs"].src), str(conf.datasets["pairs"].tgt), conf.task_runner.address) == (
        f"/data/{SECRET}/train.en",
        f"{tmp_path}/rel/train.de",  # relative: against the profile's directory
        f"tcp://user:{SECRET}-token@scheduler:8786/${{NOT_A_VARIABLE}}",
    )
    stored = dump_conf(conf)
    assert (stored["datasets"]["pairs"]["src"], stored["datasets"]["pairs"]["tgt"], stored["task_runner"]["address"]) == (
        "${DATA_DIR}/train.en",
        f"{tmp_path}/${{REL_DIR}}/train.de",  # the base joins the written form
        "tcp://user:${TOKEN}@scheduler:8786/$${NOT_A_VARIABLE}",  # a literal $ stays one ($$)
    )
    assert SECRET not in json.dumps(stored)
    assert load_recorded(stored, environ=env) == conf
    moved = load_recorded(stored, environ={**env, "DATA_DIR": "/elsewhere", "TOKEN": "t2"})
    assert (str(moved.datasets["pairs"].src), moved.task_runner.address) == (
        "/elsewhere/train.en",
        "tcp://user:t2@scheduler:8786/${NOT_A_VARIABLE}",
    )


def test_load_recorded_without_the_variable_is_one_line_naming_the_run_and_key(tmp_path):
    conf = load_profile(write(tmp_path, PROFILE), environ={"DATA_DIR": "/d", "REL_DIR": "r", "TOKEN": "tok-en-1"})
    with pytest.raises(ConfError) as info:
        load_recorded(dump_conf(conf), run_id="ingest-1", environ={"DATA_DIR": "/d", "REL_DIR": "r"})
    assert str(info.value) == (
        "<configuration of run ingest-1>: task_runner.address: environment variable TOKEN is not set "
        "(use ${TOKEN:-default} for a default)"
    )


def test_a_set_override_is_stored_as_given_and_a_default_as_resolved(tmp_path):
    text = PROFILE.replace("${REL_DIR}", "${UNSET_DIR_X:-/defaults}")
    env = {"DATA_DIR": "/d", "TOKEN": SECRET + "-2"}
    conf = load_profile(write(tmp_path, text), ["task_runner.address=tcp://other:1"], environ=env)
    stored = dump_conf(conf)
    assert (stored["datasets"]["pairs"]["tgt"], stored["task_runner"]["address"]) == ("/defaults/train.de", "tcp://other:1")


def test_redact_replaces_environment_values_inside_strings_and_short_ones_only_whole(tmp_path):
    env = {"DATA_DIR": f"/mnt/{SECRET}-3", "REL_DIR": "de", "TOKEN": "tok-en-2"}
    load_profile(write(tmp_path, PROFILE), environ=env)
    params = {"file": f"/mnt/{SECRET}-3/train.en", "lang": "de", "word": "decode", "n": 3}
    assert redact(params) == {"file": "${DATA_DIR}/train.en", "lang": "${REL_DIR}", "word": "decode", "n": 3}


def test_a_recursive_alias_is_one_line(tmp_path):
    path = write(tmp_path, "datasets: &loop\n  again: *loop\n")
    with pytest.raises(ConfError) as info:
        load_profile(path, environ={})
    assert str(info.value) == (
        f"{path}:1: datasets.again.again.again...: its aliases (*name) expand to more than 64 levels; refused (a "
        "profile holds a few hundred). Hint: write the repeated settings out, or use fewer aliases"
    )


def test_a_default_beside_a_used_variable_is_written_out_and_a_reader_without_the_variable_fails(tmp_path):
    text = PROFILE.replace("${DATA_DIR}/train.en", "${DATA_DIR:-/fallback}/${SUB_X:-sub}/train.en")
    env = {"DATA_DIR": f"/srv/{SECRET}-4", "REL_DIR": "/r", "TOKEN": "tok-en-3"}
    stored = dump_conf(load_profile(write(tmp_path, text), environ=env))
    assert stored["datasets"]["pairs"]["src"] == "${DATA_DIR}/sub/train.en"  # never /fallback on another machine
    with pytest.raises(ConfError, match="^<configuration given to the flow>: datasets.pairs.src: environment variable DATA_DIR"):
        load_recorded(stored, environ={k: v for k, v in env.items() if k != "DATA_DIR"})


def test_a_models_path_and_meta_are_registered_with_the_variable_not_its_value(tmp_path):
    """A configured model's path or parameter read from the environment is `${VAR}` in the `models` table."""
    import json

    from conf.at_rest import note_value
    from storage.catalog import Catalog

    note_value("AUGDAG_TEST_MODELS", "/secret-mount-8812")
    catalog = Catalog(tmp_path)
    catalog.register_model(
        "f" * 64, name="teacher", kind="fairseq", path="/secret-mount-8812/ckpt", run_id="r", meta={"src": "/secret-mount-8812/x"}
    )
    (row,) = catalog.query("SELECT path, meta FROM models").to_pylist()
    assert (row["path"], json.loads(row["meta"])) == ("${AUGDAG_TEST_MODELS}/ckpt", {"src": "${AUGDAG_TEST_MODELS}/x"})
