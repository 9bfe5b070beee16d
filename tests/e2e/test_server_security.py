"""The Prefect API that `augdag server` starts answers only its own UI (issue 48, defect 3), against running servers
(`augdag server`'s code path on a free port): a page of another site, by DNS rebinding (its own name in ``Host``)
or from its own origin (CORS, CSRF, a WebSocket), reads and changes nothing; the UI's origin still works, with
Prefect's CSRF token; with an API auth string set, nothing answers without it, `augdag serve` and its flow runs
still talk to the server (auth string and CSRF token from Prefect's client), and no file under the cache, the
server's database among them, holds the auth string."""

from __future__ import annotations

import base64
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from demo.tiny import TINY_SETS
from tests.conftest import augdag, free_port, subprocess_env
from tests.e2e.test_served import FAST_POLL, FINAL, background, wait_for

pytestmark = pytest.mark.slow

HOSTILE = "attacker.example"
AUTH = "augdag-e2e:marker-5b1f0c7e9d"  # user:password, a marker searched for in every file afterwards
FLOW_RUNS = {"flow_runs": {"name": {"like_": "%"}}, "limit": 1}


class prefect_server:
    """`start_server` for ``cache`` on a free loopback port with ``env`` in this process's environment while it
    starts (the server takes its settings from there); (API URL, port) in the block, stopped after it."""

    def __init__(self, cache: Path, log: Path, **env: str) -> None:
        self.cache, self.log, self.env = cache, log, env

    def __enter__(self) -> tuple[str, int]:
        from flows.ops.server import start_server

        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            self.proc, url = start_server(self.cache, port=free_port(), timeout_s=600, log=self.log)
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        return url, int(url.rsplit(":", 1)[1].split("/")[0])

    def __exit__(self, *exc) -> None:
        from flows.ops.lifecycle import stop_group
        from flows.ops.server import forget

        stop_group(self.proc.pid, grace_s=10)
        self.proc.wait(timeout=60)
        forget(self.cache)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """A server as `augdag server` starts it by default (no auth string): (API URL, port)."""
    cache = tmp_path_factory.mktemp("open") / "cache"
    with prefect_server(cache, tmp_path_factory.getbasetemp() / "server-open.log") as running:
        yield running


def call(url: str, method: str, path: str, *, host: str | None = None, origin: str | None = None, **kw) -> httpx.Response:
    """One request to the API at ``url`` as a browser page would send it: ``Host`` and ``Origin`` as given."""
    headers = {**kw.pop("headers", {}), **({"Host": host} if host else {}), **({"Origin": origin} if origin else {})}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kw)


def csrf(url: str, origin: str | None = None, auth: str | None = None) -> dict[str, str]:
    """The headers of a CSRF token that the server issues for a new client id (as the UI and Prefect's client get one)."""
    client = uuid.uuid4().hex
    r = call(url, "GET", f"/csrf-token?client={client}", origin=origin, headers=basic(auth))
    assert r.status_code == 200, r.text
    return {"Prefect-Csrf-Token": r.json()["token"], "Prefect-Csrf-Client": client, **basic(auth)}


def basic(auth: str | None) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}


def test_the_hostile_request_of_the_issue_reads_nothing(server):
    """DNS rebinding: a page of attacker.example whose name now resolves to 127.0.0.1 sends its own Host."""
    url, port = server
    for host in (HOSTILE, f"{HOSTILE}:{port}", f"127.0.0.1.{HOSTILE}:{port}"):
        r = call(url, "POST", "/flow_runs/filter", host=host, origin=f"http://{HOSTILE}", json={"limit": 1})
        assert (r.status_code, r.text) == (421, f"misdirected request: this server is not {host.rsplit(':', 1)[0]}\n")
        assert "access-control-allow-origin" not in r.headers
        assert call(url, "GET", "/flow_runs/00000000-0000-0000-0000-000000000000", host=host).status_code == 421
    # with the CSRF token it fetched for itself: still nothing, the token request is refused too
    assert call(url, "GET", "/csrf-token?client=x", host=f"{HOSTILE}:{port}").status_code == 421


def test_a_page_of_another_origin_on_the_right_host_is_refused(server):
    url, port = server
    for method, path, body in (("POST", "/flow_runs/filter", FLOW_RUNS), ("GET", "/csrf-token?client=x", None)):
        r = call(url, method, path, origin=f"http://{HOSTILE}", json=body)
        assert (r.status_code, r.text) == (403, f"forbidden: origin http://{HOSTILE} is not this server's UI\n")
    # CORS: the browser's preflight for another origin gets no allow header (Prefect's CORSMiddleware; ours answers 403)
    pre = call(
        url,
        "OPTIONS",
        "/flow_runs/filter",
        origin=f"http://{HOSTILE}",
        headers={"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"},
    )
    assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers
    # browsers apply no CORS to WebSockets: the event stream is refused to another origin at the handshake
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{port}/api/events/out", origin=f"http://{HOSTILE}", open_timeout=30).close()
    assert refused.value.response.status_code == 403


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_ui_origin_works_with_a_csrf_token_and_not_without(server, host):
    url, port = server
    ui = f"http://{host}:{port}"
    settings = call(ui, "GET", "/ui-settings", host=f"{host}:{port}").json()
    assert (settings["csrf_enabled"], settings["auth"]) == (True, None)
    headers = csrf(url, origin=ui)
    ok = call(url, "POST", "/flow_runs/filter", host=f"{host}:{port}", origin=ui, headers=headers, json=FLOW_RUNS)
    assert (ok.status_code, ok.json(), ok.headers["access-control-allow-origin"]) == (200, [], ui)
    pre = call(
        url,
        "OPTIONS",
        "/flow_runs/filter",
        origin=ui,
        headers={"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "prefect-csrf-token"},
    )
    assert (pre.status_code, pre.headers["access-control-allow-origin"]) == (200, ui)
    # CSRF: a state-changing request from the UI's origin without the token, or with another client's, is refused
    bare = call(url, "POST", "/flow_runs/filter", origin=ui, json=FLOW_RUNS)
    assert (bare.status_code, bare.json()) == (403, {"detail": "Missing CSRF token."})
    forged = {**headers, "Prefect-Csrf-Client": "another-client"}
    wrong = call(url, "POST", "/flow_runs/filter", origin=ui, headers=forged, json=FLOW_RUNS)
    assert (wrong.status_code, wrong.json()) == (403, {"detail": "Invalid CSRF token or client identifier."})
    # the UI's event stream opens (Prefect's "prefect" subprotocol, whose first message is the auth message)
    with connect(f"ws://{host}:{port}/api/events/out", origin=ui, subprotocols=["prefect"], open_timeout=30) as ws:
        assert ws.subprotocol == "prefect"


@pytest.fixture(scope="module")
def authed(tmp_path_factory) -> Iterator[tuple[Path, str, int]]:
    """A server started with PREFECT_API_AUTH_STRING in the environment (the one variable its clients read too):
    (cache, API URL, port)."""
    cache = tmp_path_factory.mktemp("authed") / "cache"
    log = cache / "server" / "server.log"  # under the cache: searched for the marker with the rest
    with prefect_server(cache, log, PREFECT_API_AUTH_STRING=AUTH) as (url, port):
        yield cache, url, port


def test_with_an_auth_string_nothing_answers_without_it(authed):
    _, url, port = authed
    assert call(url, "GET", "/health").status_code == 200  # probes need none (Prefect's rule)
    token = csrf(url, auth=AUTH)  # a CSRF token is for the auth string's holder only
    anonymous = {k: v for k, v in token.items() if k != "Authorization"}
    for auth in (None, "augdag-e2e:wrong"):
        for method, path, headers in (
            ("GET", "/csrf-token?client=x", basic(auth)),
            ("GET", "/flow_runs/00000000-0000-0000-0000-000000000000", basic(auth)),
            ("POST", "/flow_runs/filter", {**anonymous, **basic(auth)}),
        ):
            r = call(url, method, path, headers=headers, json=FLOW_RUNS if method == "POST" else None)
            assert (r.status_code, r.json()) == (401, {"exception_message": "Unauthorized"}), (method, path, auth)
    ok = call(url, "POST", "/flow_runs/filter", headers=token, json=FLOW_RUNS)
    assert (ok.status_code, ok.json()) == (200, [])
    assert call(url.removesuffix("/api"), "GET", "/ui-settings").json()["auth"] == "BASIC"


@pytest.mark.parametrize(
    "auth, error",
    [
        ("", "set PREFECT_API_AUTH_STRING=user:password"),
        ("augdag-e2e:wrong", "PREFECT_API_AUTH_STRING is not it"),
    ],
    ids=["missing", "wrong"],
)
def test_a_client_without_the_auth_string_is_told_in_one_line(authed, tmp_path, auth, error):
    """`augdag run` finds the cache's server, which asks for an auth string: one line and exit 2 before the run
    starts, not Prefect's 401 traceback from its middle."""
    cache, url, _ = authed
    (tmp_path / "a.en").write_text("hello world\n")
    (tmp_path / "a.de").write_text("hallo welt\n")
    (tmp_path / "p.yaml").write_text("datasets:\n  a: {kind: bitext, format: text, src: a.en, tgt: a.de}\n")
    ran = augdag(tmp_path, "run", "ingest", "--config", "p.yaml", "--cache", str(cache), PREFECT_API_AUTH_STRING=auth)
    line = f"error: the Prefect server at {url} asks for its API auth string: {error}"
    assert (ran.returncode, ran.stderr.splitlines(), ran.stdout) == (2, [line], "")


def test_augdag_serve_runs_a_flow_through_auth_and_csrf_and_stores_no_secret(authed, tmp_path):
    """`augdag serve` of the tiny demo's ingest, with PREFECT_API_AUTH_STRING in its environment and no
    PREFECT_API_URL (it finds the cache's server): its deployment registers, a run of it completes."""
    cache, url, _ = authed
    name = "secured"
    sets = [a for s in [*TINY_SETS, "pipelines=[ingest]"] for a in ("--set", s)]
    cmd = [sys.executable, "-m", "flows.cli", "serve", "--config", "demo", "--cache", str(cache), "--name", name, *sets]
    env = subprocess_env(tmp_path, COLUMNS="200", PREFECT_API_AUTH_STRING=AUTH, **FAST_POLL)
    auth = csrf(url, auth=AUTH)

    def post(path: str, body: dict) -> dict | list:
        r = call(url, "POST", path, headers=auth, json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()

    with background(cmd, env=env, cwd=tmp_path, log=tmp_path / "serve.log", grace_s=5) as served:
        named = {"deployments": {"name": {"any_": [name]}}}
        deployment = wait_for("the deployment", lambda: post("/deployments/filter", named), timeout_s=300, proc=served)[0]
        run = post(f"/deployments/{deployment['id']}/create_flow_run", {})

        def final():
            state = call(url, "GET", f"/flow_runs/{run['id']}", headers=basic(AUTH)).json()["state"]
            return state if state["type"] in FINAL else None

        state = wait_for(f"flow run {run['id']}", final, timeout_s=900, proc=served)
        assert state["type"] == "COMPLETED", served.output()[-4000:]
    holding = [
        str(p)
        for root in (cache, tmp_path)
        for p in sorted(root.rglob("*"))
        if p.is_file() and any(s in p.read_bytes() for s in (AUTH.encode(), basic(AUTH)["Authorization"][6:].encode()))
    ]
    assert (cache / "server" / "prefect.db").stat().st_size > 0 and holding == []
