"""The local Prefect server and UI of a cache: started by `augdag server`, found by every other command.

`augdag server` runs Prefect's server (what ``prefect server start`` serves) with ``PREFECT_HOME`` under
``<cache>/server`` (so its SQLite database, ``prefect.db``, lives beside the cache it describes) on 127.0.0.1:4200
unless told otherwise, and records its address in ``<cache>/server/server.json``. `augdag run`, `nightly`,
`demo` and `retry` report to that server when it answers, so their flow runs, task runs per stage and
shard, and artifacts show in its UI; without one they use Prefect's temporary in-process server.
``PREFECT_API_URL``, when set, always wins.

The server answers only its own UI (issue 48, defect 3): it runs behind flows/ops/prefect_guard.py (a ``Host`` other
than its own names is a 421, an ``Origin`` other than its UI's a 403), with Prefect's CSRF protection on and CORS
limited to the UI's origins (``PREFECT_SERVER_CORS_ALLOWED_ORIGINS`` from the environment wins: behind a proxy,
name its origin). ``PREFECT_API_AUTH_STRING`` (``user:password``) in its environment, or
``PREFECT_SERVER_API_AUTH_STRING``, makes the API ask for it (HTTP basic auth; the UI asks for it once); clients
send ``PREFECT_API_AUTH_STRING`` from their environment. The auth string lives in the environment only: nothing
here writes it down.

Beside it, `augdag server` serves ``<cache>/reports`` read-only over HTTP on 127.0.0.1 (the API port
+ 1 unless told otherwise, flows/ops/report_http.py), also recorded in server.json: the report and plot
links of the UI point there (flows/engine/run_artifacts.py). The Prefect server runs in a process group of
its own, which Ctrl-C, SIGTERM and SIGHUP stop as a whole (flows/ops/lifecycle.py) before server.json goes.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from conf.errors import ConfError
from flows.ops.lifecycle import Stop, spawn_group, stop_grace_s, stop_group, stop_signals, wait_group
from flows.ops.prefect_guard import allowed_hosts, host_name, ui_origins
from flows.ops.report_http import HEADER as REPORTS_HEADER
from flows.ops.report_http import serve_reports

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def state_dir(cache: Path) -> Path:
    """The server's directory in ``cache``: its PREFECT_HOME, ``server.json`` and ``server.log``."""
    return Path(cache).absolute() / "server"


def api_url(host: str, port: int) -> str:
    """The API URL of a server listening on ``host``:``port`` (127.0.0.1 for a wildcard host)."""
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/api"


def healthy(url: str, timeout_s: float = 1.0) -> bool:
    """Whether ``<url>/health`` answers 200 within ``timeout_s``."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until the server at ``url`` is healthy; a ``ConfError`` when ``proc`` exits first or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        if proc is not None and proc.poll() is not None:
            raise ConfError(f"the Prefect server exited with code {proc.returncode} before answering at {url}")
        if time.monotonic() > deadline:
            raise ConfError(f"the Prefect server did not answer at {url}/health within {timeout_s:.0f} s")
        time.sleep(0.5)


def server_command(host: str, port: int, allow_hosts: Sequence[str] = ()) -> list[str]:
    """The command line of Prefect's server behind the Host and Origin guard (flows/ops/prefect_guard.py), on
    ``host``:``port``, with this interpreter; ``allow_hosts``: more names its ``Host`` header may hold."""
    allow = [a for h in allow_hosts for a in ("--allow-host", h)]
    return [sys.executable, "-m", "flows.ops.prefect_guard", "--host", host, "--port", str(port), *allow]


def server_env(cache: Path, host: str, port: int, allow_hosts: Sequence[str] = ()) -> dict[str, str]:
    """The server's environment: its own PREFECT_HOME (and so its SQLite file) under the cache, the API
    address its UI calls (Prefect's default is port 4200 whatever port the server listens on), Prefect's CSRF
    protection on, CORS for the UI's origins only, and the API auth string when the environment has one."""
    home = state_dir(cache)
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    env.setdefault("PREFECT_UI_API_URL", api_url(host, port))  # behind a proxy or on 0.0.0.0: set it yourself
    # the first of Prefect's names for the setting wins over its alias: both say true, whatever the shell says
    env.update(PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED="true", PREFECT_SERVER_CSRF_PROTECTION_ENABLED="true")
    ui = urllib.parse.urlsplit(env["PREFECT_UI_API_URL"])
    origins = ui_origins(allowed_hosts(host, [*allow_hosts, ui.hostname or ""]), port)
    origins += [f"{ui.scheme}://{ui.netloc}"] if ui.scheme in ("http", "https") and ui.netloc else []
    env.setdefault("PREFECT_SERVER_CORS_ALLOWED_ORIGINS", ",".join(dict.fromkeys(origins)))
    if "PREFECT_SERVER_API_AUTH_STRING" not in env and os.environ.get("PREFECT_API_AUTH_STRING"):
        env["PREFECT_SERVER_API_AUTH_STRING"] = os.environ["PREFECT_API_AUTH_STRING"]  # one variable for both sides
    return env


def guarded_hosts(host: str, allow_hosts: Sequence[str] = ()) -> list[str]:
    """The ``--allow-host`` names of the server: ``allow_hosts`` and the host of ``PREFECT_UI_API_URL`` when set."""
    ui = urllib.parse.urlsplit(os.environ.get("PREFECT_UI_API_URL", "")).hostname
    return [*allow_hosts, *([host_name(ui)] if ui else [])]


def start_server(
    cache: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 4200,
    timeout_s: float = 120,
    log: Path | None = None,
    allow_hosts: Sequence[str] = (),
) -> tuple[subprocess.Popen, str]:
    """Start the server in the background in a process group of its own, wait until it answers, record it;
    returns (process, API URL). ``stop_group(proc.pid)`` stops it and whatever it started. ``allow_hosts``:
    names besides its own that the ``Host`` of a request may hold (a reverse proxy's, a DNS name)."""
    url = api_url(host, port)
    if healthy(url):
        raise ConfError(f"something already answers at {url}: stop it or pick another --port")
    allow_hosts = guarded_hosts(host, allow_hosts)
    env = server_env(cache, host, port, allow_hosts)
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 — the child keeps it
    cmd = server_command(host, port, allow_hosts)
    proc = spawn_group(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_healthy(url, timeout_s, proc)
    except BaseException:
        stop_group(proc.pid, grace_s=10)
        raise
    record(cache, url, proc.pid)
    return proc, url


def run_server(
    cache: Path,
    *,
    host: str,
    port: int,
    reports_port: int | None = None,
    on_ready: Callable[[str, str], None] = lambda url, reports: None,
    grace_s: float | None = None,
    allow_hosts: Sequence[str] = (),
) -> int:
    """`augdag server`: the Prefect server and the reports over HTTP until Ctrl-C, SIGTERM or SIGHUP (or
    the server's own exit); then the server's process group is stopped, and server.json removed.
    ``on_ready(API URL, reports URL)`` is called once both answer. Returns 0 when stopped by a signal,
    else the server's exit code."""
    cache = Path(cache).absolute()
    reports_port = port + 1 if reports_port is None else reports_port
    grace_s = stop_grace_s() if grace_s is None else grace_s
    proc, httpd, recorded = None, None, False
    with stop_signals() as signals:
        try:
            try:
                httpd = serve_reports(reports_dir(cache), reports_port)
            except OSError as e:
                raise ConfError(f"cannot serve the reports on 127.0.0.1:{reports_port}: {e}. Hint: --reports-port") from None
            log = state_dir(cache) / "server.log"
            proc, url = start_server(cache, host=host, port=port, log=log, allow_hosts=allow_hosts)
            reports = f"http://127.0.0.1:{httpd.server_address[1]}"
            record(cache, url, proc.pid, reports_url=reports)
            recorded = True
            on_ready(url, reports)
            code = wait_group(proc.pid, signals, relay=signal.SIGTERM, grace_s=grace_s)
            proc = None  # stopped and reaped
            return 0 if signals.received else code
        except Stop:
            return 0  # stopped while starting (start_server stops its group) or before waiting (finally)
        finally:
            if proc is not None:
                stop_group(proc.pid, grace_s=grace_s)
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
            if recorded:  # else server.json, if any, is another server's
                forget(cache)


def record(cache: Path, url: str, pid: int, *, reports_url: str | None = None) -> None:
    """Write the server's API URL, process id and (when given) reports URL to ``server.json``."""
    state = {"url": url, "pid": pid, **({"reports_url": reports_url} if reports_url else {})}
    (state_dir(cache) / "server.json").write_text(json.dumps(state), encoding="utf-8")


def forget(cache: Path) -> None:
    """Remove ``server.json`` (nothing when it is missing)."""
    (state_dir(cache) / "server.json").unlink(missing_ok=True)


def reports_dir(cache: Path) -> Path:
    """The directory of ``cache``'s reports, ``<cache>/reports``."""
    return Path(cache).absolute() / "reports"


def reports_server(cache: Path, timeout_s: float = 1.0) -> str | None:
    """The base URL of this cache's reports over HTTP when `augdag server` serves them now, else None."""
    try:
        url = json.loads((state_dir(cache) / "server.json").read_text(encoding="utf-8"))["reports_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/", method="HEAD"), timeout=timeout_s) as r:
            served = r.headers.get(REPORTS_HEADER)
    except urllib.error.HTTPError as e:  # 404 for "/": an answer all the same
        served = e.headers.get(REPORTS_HEADER)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return url if served == str(reports_dir(cache).resolve()) else None


def report_url(cache: Path, path: Path) -> str | None:
    """``path`` (a file under ``<cache>/reports``) over HTTP while `augdag server` serves the reports, else None."""
    base = reports_server(cache)
    try:
        rel = Path(path).resolve().relative_to(reports_dir(cache).resolve())
    except ValueError:
        return None
    return f"{base}/{urllib.parse.quote(rel.as_posix())}" if base else None


def find_server(cache: Path) -> str | None:
    """The API URL of this cache's running server (``augdag server``), or None."""
    path = state_dir(cache) / "server.json"
    try:
        url = json.loads(path.read_text(encoding="utf-8"))["url"]
    except (OSError, ValueError, KeyError):
        return None
    return url if healthy(url) else None


def check_auth(url: str, timeout_s: float = 5.0) -> None:
    """A ``ConfError`` when the API at ``url`` answers 401 to a read with this process's ``PREFECT_API_AUTH_STRING``
    (none, or not the server's): one line before a run starts, not Prefect's traceback in its middle. A server
    that does not answer is left to Prefect's client; with ``PREFECT_API_KEY`` (Prefect Cloud) nothing is checked."""
    if os.environ.get("PREFECT_API_KEY"):
        return
    auth = os.environ.get("PREFECT_API_AUTH_STRING")
    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url}/admin/version", headers=headers), timeout=timeout_s).close()
    except urllib.error.HTTPError as e:
        if e.code == 401:
            raise ConfError(
                f"the Prefect server at {url} asks for its API auth string: "
                + ("PREFECT_API_AUTH_STRING is not it" if auth else "set PREFECT_API_AUTH_STRING=user:password")
            ) from None
    except (urllib.error.URLError, OSError, ValueError):
        return


def connect(cache: Path) -> str | None:
    """Point this process's Prefect client at the cache's server when one runs (call before Prefect is
    imported); returns the API URL in use, or None for Prefect's temporary server. A ``ConfError`` when that
    server asks for an auth string this process does not have (``check_auth``)."""
    url = os.environ.get("PREFECT_API_URL") or find_server(cache)
    if url:
        check_auth(url)
        os.environ["PREFECT_API_URL"] = url
    return url
