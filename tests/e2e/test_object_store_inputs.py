"""Inputs on an object store (issue 29): a dataset's `src`, `tgt` or `path` as an ``s3://`` URI, gzipped or not, read
by `augdag run ingest` against moto's S3 server as the same bytes on disk are read; a missing object and a URL that is
no object store are one line and exit 2."""

import gzip
import json
import subprocess

import pyarrow as pa

from storage import objects
from storage.catalog import Catalog
from tests.conftest import augdag

PROFILE = """\
pipelines: [ingest]
shard_size: 3
datasets:
  pairs:
    kind: bitext
    format: text
    src: {src}
    tgt: {tgt}
    src_lang: en
    tgt_lang: de
    clean: false
  sentences:
    kind: mono
    format: parquet
    path: {mono}
    clean: false
"""
EN = ["a house", "the cat sleeps", "a house", "café au lait", "one more line"]
DE = ["ein haus", "die katze schläft", "ein haus", "milchkaffee", "noch eine zeile"]


def _ingest(tmp_path, name: str, src: str, tgt: str, mono: str, env: dict) -> subprocess.CompletedProcess:
    from prefect.settings import PREFECT_API_URL

    profile = tmp_path / f"{name}.yaml"
    profile.write_text(PROFILE.format(src=src, tgt=tgt, mono=mono))
    return augdag(
        tmp_path,
        "run",
        "ingest",
        "--config",
        str(profile),
        "--cache",
        str(tmp_path / name),
        PREFECT_API_URL=PREFECT_API_URL.value(),
        **env,
    )


def test_inputs_on_s3_gzipped_or_not_are_read_as_the_same_bytes_on_disk(prefect_harness, tmp_path, s3_env):
    bucket = s3_env.bucket("aug-inputs")
    en, de = gzip.compress("\n".join(EN).encode() + b"\n", mtime=0), ("\n".join(DE) + "\n").encode()
    mono = objects.parquet_bytes(pa.table({"text": EN}), {})
    (
        (tmp_path / "train.en.gz").write_bytes(en),
        (tmp_path / "train.de").write_bytes(de),
        (tmp_path / "mono.parquet").write_bytes(mono),
    )
    for key, data in (("corpus/train.en.gz", en), ("corpus/train.de", de), ("corpus/mono.parquet", mono)):
        objects.put_bytes(data, f"{bucket}/{key}")
    remote = _ingest(
        tmp_path,
        "remote",
        f"{bucket}/corpus/train.en.gz",
        f"{bucket}/corpus/train.de",
        f"{bucket}/corpus/mono.parquet",
        s3_env.env,
    )
    assert remote.returncode == 0, remote.stdout[-3000:] + remote.stderr[-3000:]
    local = _ingest(
        tmp_path, "local", str(tmp_path / "train.en.gz"), str(tmp_path / "train.de"), str(tmp_path / "mono.parquet"), {}
    )
    assert local.returncode == 0, local.stderr[-3000:]
    sql = "SELECT src, tgt, line FROM bitext ORDER BY line"
    assert Catalog(tmp_path / "remote").query(sql).to_pylist() == Catalog(tmp_path / "local").query(sql).to_pylist()
    assert Catalog(tmp_path / "remote").query(sql)["src"].to_pylist() == EN  # decompressed, every copy kept (clean: false)
    mono_sql = "SELECT text, line FROM mono ORDER BY line"
    assert Catalog(tmp_path / "remote").query(mono_sql).to_pylist() == Catalog(tmp_path / "local").query(mono_sql).to_pylist()
    params = Catalog(tmp_path / "remote").query("SELECT params FROM artifacts WHERE stage = 'read' AND dataset = 'pairs'")
    read = json.loads(params["params"][0].as_py())  # content-addressed (issue 48): the bytes, not where they are
    assert "src" not in read["conf"] and read["compression"]["src"] == "gzip"
    # cached on a second run: the object's sha256 is remembered under its URI, size and time
    again = _ingest(
        tmp_path,
        "remote",
        f"{bucket}/corpus/train.en.gz",
        f"{bucket}/corpus/train.de",
        f"{bucket}/corpus/mono.parquet",
        s3_env.env,
    )
    assert again.returncode == 0 and "0 computed" in " ".join(again.stdout.split()), again.stdout[-2000:]


def test_a_missing_object_or_a_url_that_is_no_object_store_is_one_line_and_exit_2(prefect_harness, tmp_path, s3_env):
    bucket = s3_env.bucket("aug-missing")
    objects.put_bytes(b"x\n", f"{bucket}/de")
    objects.put_bytes(objects.parquet_bytes(pa.table({"text": ["x"]}), {}), f"{bucket}/m.parquet")
    missing = _ingest(tmp_path, "a", f"{bucket}/no/such.en.gz", f"{bucket}/de", f"{bucket}/m.parquet", s3_env.env)
    assert missing.returncode == 2 and missing.stderr.count("\n") <= 2, missing.stderr
    assert f"{bucket}/no/such.en.gz: no such object" in missing.stderr
    http = _ingest(tmp_path, "b", "https://example.org/train.en", f"{bucket}/de", f"{bucket}/m.parquet", s3_env.env)
    assert http.returncode == 2 and "https:// is not read here; a dataset is a local path or an object-store URI" in http.stderr
