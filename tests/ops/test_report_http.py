"""The reports server (flows/ops/report_http.py) against a real client on a real port: a symbolic link swapped in
while it serves never leads out, bad paths and foreign Hosts are refused, and a client that hangs up is not a
traceback (issue 26, defect 10)."""

from __future__ import annotations

import http.client
import os
import socket
import struct
import threading
import time

import pytest

from flows.ops.report_http import HEADER, serve_reports

INSIDE, SECRET = b"inside the reports", b"root:x:0:0:SECRET outside the reports"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(reports dir, outside dir, port) of one server on port 0 for the module (each test its own names)."""
    tmp_path = tmp_path_factory.mktemp("served")
    reports, outside = tmp_path / "reports", tmp_path / "outside"
    (reports / "run-1").mkdir(parents=True)
    outside.mkdir()
    (reports / "run-1" / "page.html").write_bytes(INSIDE)
    (outside / "page.html").write_bytes(SECRET)
    (outside / "passwd").write_bytes(SECRET)
    httpd = serve_reports(reports, 0)
    try:
        yield reports, outside, httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def get(port: int, target: str, host: str | None = "127.0.0.1", method: str = "GET") -> tuple[int, bytes, dict]:
    """One request as sent on the wire (``target`` unaltered, ``host=None`` sends no Host header)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host.format(port=port))
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        conn.close()


def test_report_http_serves_a_file_with_its_type_and_length(served):
    reports, _, port = served
    status, body, headers = get(port, "/run-1/page.html")
    assert (status, body) == (200, INSIDE)
    assert headers["Content-Type"] == "text/html" and headers["Content-Length"] == str(len(INSIDE))
    assert headers[HEADER] == os.path.realpath(reports)
    status, body, headers = get(port, "/run-1/page.html", method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", str(len(INSIDE)))


def test_report_http_follows_links_inside_and_refuses_links_out(served):
    reports, outside, port = served
    (reports / "rel").symlink_to("run-1/page.html")
    (reports / "abs").symlink_to(reports / "run-1" / "page.html")
    (reports / "dir").symlink_to("run-1")
    (reports / "out").symlink_to(outside / "passwd")
    (reports / "up").symlink_to("../outside/passwd")
    (reports / "outdir").symlink_to(outside)
    (reports / "loop").symlink_to("loop")
    for path in ("/rel", "/abs", "/dir/page.html", "/run-1/../rel"):
        assert get(port, path)[:2] == (200, INSIDE), path
    for path in (
        "/out",
        "/up",
        "/outdir/passwd",
        "/loop",
        "/",
        "/run-1",
        "/run-1/",
        "/../outside/passwd",
        "/run-1/%2e%2e/%2e%2e/outside/passwd",
        "//outside/passwd",
        "/%2f../outside/passwd",
    ):
        assert get(port, path)[0] == 404, path


@pytest.mark.parametrize("target", ["/run-1/page.html%00", "/run-1/page%00.html", "/%ff.html", "/run-1/%zz", "/run-1/page.html%"])
def test_report_http_refuses_nul_and_bad_percent_encoding_with_400(served, target):
    assert get(served[2], target)[0] == 400


@pytest.mark.parametrize(
    "host, status",
    [
        ("127.0.0.1", 200),
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
        ("LocalHost", 200),
        ("[::1]:{port}", 200),
        ("evil.example", 421),
        ("evil.example:{port}", 421),
        ("127.0.0.1.evil.example", 421),
        ("localhost.:{port}", 421),
        ("localhost:{port}@evil.example", 421),
        ("0.0.0.0:{port}", 421),
        (None, 400),
    ],
)
def test_report_http_accepts_only_a_loopback_host(served, host, status):
    code, body, headers = get(served[2], "/run-1/page.html", host=host)
    assert code == status and (body == INSIDE) == (status == 200)
    assert (HEADER in headers) == (status == 200)  # a rebinding page learns nothing, not even the directory


def test_report_http_never_serves_outside_while_a_link_is_swapped(served):
    """A thread swaps `reports/race` (a file or a link out) and `reports/d` (a directory or a link to one
    outside) as fast as it can, while the client GETs each 200 times: the outside bytes never come back."""
    reports, outside, port = served
    (reports / "race").write_bytes(INSIDE)
    (reports / "d").mkdir()
    (reports / "d" / "page.html").write_bytes(INSIDE)
    (reports / ".file").write_bytes(INSIDE)
    stop = threading.Event()

    def swap() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            link, dlink = reports / f".link{i}", reports / f".dlink{i}"
            link.symlink_to(outside / "passwd")
            os.replace(link, reports / "race")
            dlink.symlink_to(outside)
            os.rename(reports / "d", reports / ".dir")
            os.replace(dlink, reports / "d")
            os.link(reports / ".file", reports / f".file{i}")
            os.replace(reports / f".file{i}", reports / "race")
            os.unlink(reports / "d")
            os.rename(reports / ".dir", reports / "d")

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        bodies = [get(port, path)[:2] for _ in range(200) for path in ("/race", "/d/page.html")]
    finally:
        stop.set()
        swapper.join(10)
    assert not [b for _, b in bodies if SECRET in b]
    assert {s for s, _ in bodies} <= {200, 404} and (200, INSIDE) in bodies  # served inside while swapping


def handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "process_request_thread" in t.name]


def test_report_http_is_quiet_when_a_client_hangs_up_mid_response(served, capfd):
    reports, _, port = served
    (reports / "big.bin").write_bytes(os.urandom(1 << 20) * 16)  # far more than the socket buffers hold
    capfd.readouterr()
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert s.recv(64).startswith(b"HTTP/1.0 200")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST: a reset, not a FIN
        s.close()
    deadline = time.monotonic() + 20
    while handler_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handler_threads() == []
    assert get(port, "/run-1/page.html")[:2] == (200, INSIDE)  # still serving
    assert capfd.readouterr().err == ""
