"""The guard in front of Prefect's server (flows/ops/prefect_guard.py) and the settings `augdag server` gives it
(flows/ops/server.py ``server_env``), without a server: an ASGI app behind ``HostGuard``, called through httpx's
ASGI transport. Against running servers: tests/e2e/test_server_security.py."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from flows.ops.prefect_guard import HostGuard, allowed_hosts, host_name, ui_origins
from flows.ops.server import guarded_hosts, server_command, server_env


async def app(scope, receive, send) -> None:
    """What stands behind the guard: 200 "behind" for HTTP; the lifespan's startup completed."""
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"behind"})


GUARD = HostGuard(app, hosts=allowed_hosts("127.0.0.1"), origins=ui_origins(allowed_hosts("127.0.0.1"), 4200))


def get(headers: list[tuple[str, str]], guard: HostGuard = GUARD) -> tuple[int, str]:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://127.0.0.1:4200") as c:
            request = c.build_request("GET", "/api/health")
            request.headers = httpx.Headers([(k, v) for k, v in request.headers.items() if k != "host"] + headers)
            return await c.send(request)

    r = asyncio.run(go())
    return r.status_code, r.text


@pytest.mark.parametrize(
    "header, name",
    [
        ("127.0.0.1:4200", "127.0.0.1"),
        ("[::1]:4200", "::1"),
        ("[::1]", "::1"),
        ("LocalHost.:80", "localhost"),
        ("attacker.example", "attacker.example"),
        ("::1", "::1"),  # not a valid Host, but never mistaken for host "" port "1"
    ],
)
def test_host_name_drops_port_brackets_case_and_trailing_dot(header, name):
    assert host_name(header) == name


def test_allowed_hosts_are_loopback_the_bind_address_and_the_extra_names():
    assert allowed_hosts("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts("10.0.0.5", ["Proxy.Example."]) == {"127.0.0.1", "localhost", "::1", "10.0.0.5", "proxy.example"}
    # a wildcard address is no name: the machine's own names instead
    assert allowed_hosts("0.0.0.0") == {"127.0.0.1", "localhost", "::1", socket.gethostname().lower(), socket.getfqdn().lower()}
    assert ui_origins(["::1", "localhost"], 4200) == ["http://[::1]:4200", "http://localhost:4200"]


@pytest.mark.parametrize(
    "headers, answer",
    [
        ([("host", "127.0.0.1:4200")], (200, "behind")),
        ([("host", "localhost:4200"), ("origin", "http://localhost:4200")], (200, "behind")),
        ([("host", "[::1]:4200"), ("origin", "HTTP://[::1]:4200/")], (200, "behind")),
        ([("host", "attacker.example:4200")], (421, "misdirected request: this server is not attacker.example\n")),
        ([], (421, "misdirected request: this server is not \n")),
        ([("host", "127.0.0.1"), ("host", "attacker.example")], (421, "misdirected request: this server is not \n")),
        ([("host", "evil\x1b]0;x")], (421, "misdirected request: this server is not evil\\x1b]0;x\n")),
        (
            [("host", "127.0.0.1:4200"), ("origin", "http://attacker.example")],
            (403, "forbidden: origin http://attacker.example is not this server's UI\n"),
        ),
        ([("host", "127.0.0.1:4200"), ("origin", "null")], (403, "forbidden: origin null is not this server's UI\n")),
        (
            [("host", "127.0.0.1:4200"), ("origin", "http://127.0.0.1:4201")],
            (403, "forbidden: origin http://127.0.0.1:4201 is not this server's UI\n"),
        ),
    ],
    ids=[
        "host",
        "ui-origin",
        "ipv6",
        "hostile-host",
        "no-host",
        "two-hosts",
        "escaped",
        "hostile-origin",
        "null-origin",
        "other-port",
    ],
)
def test_the_guard_answers_only_its_own_names_and_origins(headers, answer):
    assert get(headers) == answer


def test_origins_none_lets_any_origin_through_on_an_allowed_host():
    """``*`` in PREFECT_SERVER_CORS_ALLOWED_ORIGINS (an operator's explicit choice): the Host check still holds."""
    guard = HostGuard(app, hosts=allowed_hosts("127.0.0.1"), origins=None)
    assert get([("host", "127.0.0.1"), ("origin", "http://attacker.example")], guard) == (200, "behind")
    assert get([("host", "attacker.example"), ("origin", "http://attacker.example")], guard)[0] == 421


def test_the_lifespan_passes_through_to_prefects_app():
    sent = []

    async def go() -> None:
        messages = iter([{"type": "lifespan.startup"}])

        async def receive():
            return next(messages)

        async def send(message):
            sent.append(message)

        await GUARD({"type": "lifespan"}, receive, send)

    asyncio.run(go())
    assert sent == [{"type": "lifespan.startup.complete"}]


def test_server_env_turns_csrf_on_limits_cors_and_passes_the_auth_string(tmp_path, monkeypatch):
    for k in ("PREFECT_SERVER_CORS_ALLOWED_ORIGINS", "PREFECT_UI_API_URL", "PREFECT_SERVER_API_AUTH_STRING"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED", "false")  # a shell's setting: overridden
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "u:p")
    env = server_env(tmp_path, "127.0.0.1", 4300)
    assert (env["PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED"], env["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"]) == ("true", "true")
    assert env["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"] == "http://127.0.0.1:4300,http://[::1]:4300,http://localhost:4300"
    assert env["PREFECT_SERVER_API_AUTH_STRING"] == "u:p" and "PREFECT_API_AUTH_STRING" not in env
    assert server_command("127.0.0.1", 4300, ["a.example"])[1:] == [
        "-m",
        "flows.ops.prefect_guard",
        "--host",
        "127.0.0.1",
        "--port",
        "4300",
        "--allow-host",
        "a.example",
    ]


def test_behind_a_proxy_its_origin_and_host_are_allowed(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_SERVER_CORS_ALLOWED_ORIGINS", raising=False)
    monkeypatch.setenv("PREFECT_UI_API_URL", "https://prefect.example.org/api")
    env = server_env(tmp_path, "127.0.0.1", 4300, guarded_hosts("127.0.0.1"))
    assert env["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"].split(",") == [
        "http://127.0.0.1:4300",
        "http://[::1]:4300",
        "http://localhost:4300",
        "http://prefect.example.org:4300",
        "https://prefect.example.org",
    ]
    assert guarded_hosts("127.0.0.1", ["b.example"]) == ["b.example", "prefect.example.org"]
    # an operator's own CORS list wins
    monkeypatch.setenv("PREFECT_SERVER_CORS_ALLOWED_ORIGINS", "https://ui.example")
    assert server_env(tmp_path, "127.0.0.1", 4300)["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"] == "https://ui.example"
