"""storage/output.py in process (issue 48, defects 6 and 10): what ``check_target`` decides for each kind of node,
the descriptors ``-o`` writes through, and TSV's raw lines. Through the CLI: tests/e2e/test_output_terminal_tsv.py."""

from __future__ import annotations

import os
import socket
import threading

import pyarrow as pa
import pytest

from conf.errors import CatalogError, ConfError
from storage.output import DESCRIPTOR, INTO, REPLACE, check_target, descriptor, tsv_table, write_table


def test_check_target_replaces_files_writes_into_fifos_and_devices_and_refuses_the_rest(tmp_path):
    cache = tmp_path / "cache"
    (cache / "artifacts").mkdir(parents=True)
    (tmp_path / "f.csv").write_text("old")
    os.mkfifo(tmp_path / "p.csv")
    (tmp_path / "to_file").symlink_to(tmp_path / "f.csv")
    (tmp_path / "to_null").symlink_to("/dev/null")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    (tmp_path / "into_cache").symlink_to(cache / "artifacts")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.csv"))
    try:
        hows = {
            name: check_target(tmp_path / name, force=True, cache=cache)
            for name in ("new.csv", "f.csv", "p.csv", "to_file", "dangling")
        }
        with pytest.raises(ConfError) as to_null:
            check_target(tmp_path / "to_null", force=True)
        with pytest.raises(ConfError) as sock_forced:
            check_target(tmp_path / "s.csv", force=True)
        with pytest.raises(ConfError) as below_cache_link:
            check_target(tmp_path / "into_cache" / "x.parquet", cache=cache)
    finally:
        sock.close()
    assert hows == {"new.csv": REPLACE, "f.csv": REPLACE, "p.csv": INTO, "to_file": REPLACE, "dangling": REPLACE}
    assert check_target("/dev/null") == INTO  # written into, as cp does; never replaced, --force or not
    assert str(to_null.value) == (
        f"{tmp_path}/to_null: is a symbolic link to a character device (/dev/null); --force replaces a regular file "
        "or a link to one, never a device's link. Hint: name the device or FIFO itself, or -o -"
    )
    assert str(sock_forced.value) == (
        f"{tmp_path}/s.csv: is a socket; augdag writes a regular file, or into a FIFO or character device. Hint: another name"
    )
    assert str(below_cache_link.value) == (
        f"{tmp_path}/into_cache/x.parquet: is inside the cache {cache} ({cache}/artifacts/x.parquet); -o never writes "
        "into the cache. Hint: a path outside it"
    )
    paths = ("-", "/dev/stdout", "/dev/stderr", "/dev/fd/7", "/proc/self/fd/1", "/dev/fdx/1", "./-", "/tmp/-")
    assert [descriptor(p) for p in paths] == [1, 1, 2, 7, 1, None, None, None]
    assert check_target("-", cache=cache) == DESCRIPTOR


def test_write_table_streams_into_a_fifo_and_leaves_it_a_fifo(tmp_path):
    fifo = tmp_path / "p.tsv"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    rows = write_table(pa.table({"src": ["a", 'b "q"'], "tgt": ["x", None]}), fifo, "tsv", header=False)
    reader.join(timeout=30)
    assert (rows, got) == (2, [b'a\tx\nb "q"\t\n'])
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


def test_tsv_is_raw_with_null_empty_numbers_as_text_nested_as_json_and_refuses_tabs_and_breaks():
    table = pa.table(
        {
            "s": ['say "hi", then', None],
            "n": [1.5, None],
            "b": [True, False],
            "l": [["a", "b"], []],
        }
    )
    assert tsv_table(table) == 's\tn\tb\tl\nsay "hi", then\t1.5\ttrue\t["a", "b"]\n\t\tfalse\t[]\n'
    assert tsv_table(table, header=False).splitlines()[0] == 'say "hi", then\t1.5\ttrue\t["a", "b"]'
    for value, what in (("a\tb", "a tab"), ("a\nb", "a line feed"), ("a\rb", "a carriage return")):
        broken = pa.table({"src": ["ok", value], "source": ["news", "news"], "line": [7, 8]})
        with pytest.raises(CatalogError) as e:
            tsv_table(broken)
        assert str(e.value) == (
            f"row 2 (source news, line 8), column 'src': holds {what}; TSV is written raw, without quoting, so the "
            "row would split. Hint: --format csv or jsonl (they quote), or replace it in the query"
        )
    with pytest.raises(CatalogError) as name:
        tsv_table(pa.table({"a\tb": [1]}))
    assert str(name.value) == "column name 'a\\tb': holds a tab; a TSV header cannot hold it. Hint: name it apart (AS)"
