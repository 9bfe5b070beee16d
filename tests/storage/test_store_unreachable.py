"""An object store that refuses or never answers fails in bounded time, as one ``StoreUnreachable`` naming the object,
the endpoint and the settings (issue 48, defect 7; storage/objects/reach.py). In process, against a port that refuses
and a loopback socket that accepts and never answers."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import duckdb
import pytest

from conf.sections.storage import StorageConf
from storage import objects
from storage.objects.reach import StoreUnreachable, Timeouts
from storage.objects.sql import duckdb_filesystem
from tests.conftest import free_port


@pytest.fixture
def silent():
    """A loopback server that accepts every connection and never sends a byte: its ``port`` and ``accepted``
    connections."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield SimpleNamespace(port=server.getsockname()[1], accepted=accepted)
    server.close()
    for c in accepted:
        c.close()


@pytest.fixture
def store_at(monkeypatch):
    """Point this process's S3 filesystem at ``http://127.0.0.1:PORT`` with small timeouts; undone afterwards."""

    def point(port: int, **timeouts: float) -> str:
        for k, v in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        objects.reset()  # a filesystem an earlier test made is bound to its endpoint
        objects.configure(SimpleNamespace(**{"connect_timeout_s": 2.0, "read_timeout_s": 1.0, "retries": 0, **timeouts}))
        return f"http://127.0.0.1:{port}"

    yield point
    objects.configure(Timeouts())
    objects.reset()


def test_a_port_that_refuses_is_one_line_naming_the_object_and_the_endpoint(store_at):
    endpoint = store_at(free_port(), retries=1)
    manifest, directory = "s3://bucket/night/artifacts/read/abc/manifest.json", "s3://bucket/night/artifacts/read/abc"
    for call, named in (
        (lambda: objects.read_bytes(manifest), manifest),
        (lambda: objects.put_bytes(b"x", manifest), manifest),
        (lambda: objects.listing(directory), directory),
    ):
        with pytest.raises(StoreUnreachable) as e:
            call()
        message = str(e.value)
        port = endpoint.rsplit(":", 1)[1]
        assert message.startswith(
            f"{named}: the object store at {endpoint} did not answer (Failed to connect to 127.0.0.1:{port} "
        )
        assert message.endswith(
            "Could not connect to server; 2 tries, storage.connect_timeout_s = 2 s); is it running, and are "
            "AWS_ENDPOINT_URL and storage.artifacts right?"
        )
        assert "\n" not in message and e.value.exit_code == 1


def test_a_socket_that_never_answers_fails_after_its_tries_of_the_read_timeout(store_at, silent):
    endpoint = store_at(silent.port, retries=1)
    with pytest.raises(StoreUnreachable) as e:
        objects.read_bytes("s3://bucket/k/manifest.json")
    assert str(e.value) == (
        f"s3://bucket/k/manifest.json: the object store at {endpoint} did not answer (no byte within "
        "storage.read_timeout_s = 1 s; 2 tries, storage.connect_timeout_s = 2 s); is it running, and are "
        "AWS_ENDPOINT_URL and storage.artifacts right?"
    )
    # the configured tries, not the SDK's 3 (nor a second HEAD to tell a missing object from a silent store)
    assert len(silent.accepted) == 2


def test_the_storage_section_holds_the_timeouts_with_their_defaults():
    assert StorageConf().model_dump(include={"connect_timeout_s", "read_timeout_s", "retries"}) == {
        "connect_timeout_s": 10.0,
        "read_timeout_s": 30.0,
        "retries": 2,
    }
    assert Timeouts() == Timeouts(10.0, 30.0, 2)
    with pytest.raises(ValueError, match="read_timeout_s"):
        StorageConf(read_timeout_s=0)


def test_duckdb_reading_a_store_that_refuses_names_it_in_one_line(store_at):
    endpoint = store_at(free_port())
    con = duckdb.connect()
    objects.register(con, {"s3"})
    with pytest.raises(duckdb.Error) as e:
        con.execute("SELECT count(*) FROM read_parquet('s3://bucket/night/artifacts/clean/ab/part-00000.parquet')")
    assert f"s3://bucket/night/artifacts/clean/ab/part-00000.parquet: the object store at {endpoint} did not answer" in str(
        e.value
    )
    with pytest.raises(StoreUnreachable):
        duckdb_filesystem("s3").info("s3://bucket/night/x.parquet")
