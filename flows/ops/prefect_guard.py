"""The Prefect server that `augdag server` and docker-compose.yml's ``prefect-server`` run: Prefect's own app (what
``prefect server start`` serves: ``prefect.server.api.server.create_app``) behind a guard that lets it answer only
its own UI (issue 48, defect 3).

    python -m flows.ops.prefect_guard --host 127.0.0.1 --port 4200 [--allow-host NAME ...] [--no-services]

Prefect has no check of ``Host``, and its CORS and CSRF settings are open by default. Here:

- **Host** (DNS rebinding): a request, HTTP or WebSocket, whose ``Host`` (any port) is not 127.0.0.1, localhost,
  ::1, the address it listens on (for 0.0.0.0 or ::, the machine's host name) or an ``--allow-host`` name is
  answered ``421 Misdirected Request``, as the reports port answers (flows/ops/report_http.py): a page whose name
  an attacker rebinds to this machine reads and changes nothing.
- **Origin**: a request that carries an ``Origin`` not in Prefect's ``PREFECT_SERVER_CORS_ALLOWED_ORIGINS`` is
  answered ``403``. Browsers send ``Origin`` with every cross-origin request and every WebSocket handshake, and
  apply no CORS to WebSockets: without this, any page could read the event stream (``/api/events/out``).
  ``*`` in the setting switches this check off (and opens CORS: Prefect's own default, never ours).
- **CORS, CSRF and the API auth string** are Prefect's: ``PREFECT_SERVER_CORS_ALLOWED_ORIGINS``,
  ``PREFECT_SERVER_CSRF_PROTECTION_ENABLED`` and ``PREFECT_SERVER_API_AUTH_STRING``, which flows/ops/server.py
  (or the compose file) sets in this process's environment; Prefect's client fetches the CSRF token and sends
  ``PREFECT_API_AUTH_STRING`` by itself.

The app is built and served as ``prefect server start`` does for one worker process (``create_app(final=True)``
under uvicorn, with Prefect's keep-alive and WebSocket ping settings); ``--no-services`` is its ``--no-services``.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, brackets or trailing dot, lower case: ``[::1]:80`` → ``::1``."""
    value = header.strip().lower()
    if value.startswith("["):
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a request's ``Host`` may hold for a server listening on ``bind``: the loopback names, ``bind``
    (for a wildcard address, this machine's host name and fully qualified name instead) and ``extra``."""
    own = (socket.gethostname(), socket.getfqdn()) if bind in WILDCARDS else (bind,)
    return frozenset(host_name(h) for h in (*LOOPBACK_NAMES, *own, *extra) if h)


def ui_origins(hosts: Iterable[str], port: int) -> list[str]:
    """The origins of the UI served on ``port`` under each of ``hosts``: ``http://127.0.0.1:4200``, ``http://[::1]:4200``."""
    return [f"http://{f'[{h}]' if ':' in h else h}:{port}" for h in sorted(hosts)]


def printable(text: str) -> str:
    """``text`` with anything but printable ASCII escaped (``\\x1b``), for a one-line answer."""
    return "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in text)


class HostGuard:
    """ASGI middleware: refuses a request whose ``Host`` is not one of ``hosts`` (421) or whose ``Origin`` is not
    one of ``origins`` (403; ``origins`` None: any), before ``app`` sees it. A WebSocket handshake is closed
    instead (the server answers it 403). Lifespan and other scopes pass through untouched.

    Args:
        app: the application behind the guard (Prefect's).
        hosts: the allowed names, as ``host_name`` writes them.
        origins: the allowed ``Origin`` values (``scheme://host[:port]``), or None to allow any.
    """

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str], origins: Iterable[str] | None) -> None:
        self.app = app
        self.hosts = frozenset(hosts)
        self.origins = None if origins is None else frozenset(o.strip().rstrip("/").lower() for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"]
        origins = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"origin"]
        host = host_name(hosts[0]) if len(hosts) == 1 else ""  # none, or two that may disagree: refused
        origin = origins[0] if len(origins) == 1 else None if not origins else "(several)"
        if host not in self.hosts:
            await self.refuse(scope, send, 421, f"misdirected request: this server is not {printable(host)}")
        elif origin is not None and self.origins is not None and origin.strip().rstrip("/").lower() not in self.origins:
            await self.refuse(scope, send, 403, f"forbidden: origin {printable(origin)} is not this server's UI")
        else:
            await self.app(scope, receive, send)

    @staticmethod
    async def refuse(scope: Scope, send: Send, status: int, message: str) -> None:
        """Answer ``status`` with ``message`` as one line of text (a WebSocket: close before accepting)."""
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = f"{message}\n".encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-content-type-options", b"nosniff"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def cors_origins() -> list[str] | None:
    """The origins of Prefect's ``PREFECT_SERVER_CORS_ALLOWED_ORIGINS`` (None for ``*``: any)."""
    from prefect.settings import PREFECT_SERVER_CORS_ALLOWED_ORIGINS

    origins = [o.strip() for o in PREFECT_SERVER_CORS_ALLOWED_ORIGINS.value().split(",") if o.strip()]
    return None if "*" in origins else origins


def ephemeral_app() -> ASGIApp:
    """uvicorn's factory for Prefect's temporary server (flows/ops/ephemeral.py): Prefect's ``create_app`` as that
    server builds it (its environment says ephemeral and final), behind the guard with the loopback names only and
    no ``Origin`` at all: it serves no UI and augdag's own client sends none, so no web page reads or drives it."""
    from prefect.server.api.server import create_app

    return HostGuard(create_app(), hosts=allowed_hosts("127.0.0.1"), origins=[])


def main(argv: list[str] | None = None) -> None:
    """Serve Prefect's API and UI behind ``HostGuard`` until stopped (uvicorn handles SIGINT and SIGTERM)."""
    parser = argparse.ArgumentParser(prog="python -m flows.ops.prefect_guard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=4200, help="port of the API and UI")
    parser.add_argument("--allow-host", action="append", default=[], help="another name the Host header may hold")
    parser.add_argument("--no-services", action="store_true", help="the API and UI only (prefect server start's flag)")
    args = parser.parse_args(argv)

    import uvicorn
    from prefect.server.api.server import create_app
    from prefect.settings import get_current_settings

    settings = get_current_settings().server
    app = HostGuard(
        create_app(final=True, webserver_only=args.no_services),
        hosts=allowed_hosts(args.host, args.allow_host),
        origins=cors_origins(),
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        timeout_keep_alive=settings.api.keepalive_timeout,
        ws_ping_interval=settings.api.websocket_ping_interval,
        ws_ping_timeout=settings.api.websocket_ping_timeout,
        log_level=settings.logging_level.lower(),
    )


if __name__ == "__main__":
    main()
