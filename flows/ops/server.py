"""The local Prefect server and UI of a cache: started by `augdag server`, found by every other command.

`augdag server` runs ``prefect server start`` with ``PREFECT_HOME`` under ``<cache>/server`` (so its
SQLite database, ``prefect.db``, lives beside the cache it describes) on 127.0.0.1:4200 unless told
otherwise, and records its address in ``<cache>/server/server.json``. `augdag run`, `nightly`,
`demo` and `retry` report to that server when it answers, so their flow runs, task runs per stage and
shard, and artifacts show in its UI; without one they use Prefect's temporary in-process server.
``PREFECT_API_URL``, when set, always wins.

Beside it, `augdag server` serves ``<cache>/reports`` read-only over HTTP on 127.0.0.1 (the API port
+ 1 unless told otherwise, flows/ops/report_http.py), also recorded in server.json: the report and plot
links of the UI point there (flows/engine/run_artifacts.py). The Prefect server runs in a process group of
its own, which Ctrl-C, SIGTERM and SIGHUP stop as a whole (flows/ops/lifecycle.py) before server.json goes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from conf.errors import ConfError
from flows.ops.lifecycle import Stop, spawn_group, stop_grace_s, stop_group, stop_signals, wait_group
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


def server_command(host: str, port: int) -> list[str]:
    """The ``prefect server start`` command line on ``host``:``port`` (the venv's ``prefect`` when there is one)."""
    exe = Path(sys.executable).parent / "prefect"
    prefect = str(exe) if exe.exists() else shutil.which("prefect") or "prefect"
    return [prefect, "server", "start", "--host", host, "--port", str(port), "--analytics-off"]


def server_env(cache: Path, host: str, port: int) -> dict[str, str]:
    """The server's environment: its own PREFECT_HOME (and so its SQLite file) under the cache, and the
    API address its UI calls (Prefect's default is port 4200 whatever port the server listens on)."""
    home = state_dir(cache)
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    env.setdefault("PREFECT_UI_API_URL", api_url(host, port))  # behind a proxy or on 0.0.0.0: set it yourself
    return env


def start_server(
    cache: Path, *, host: str = "127.0.0.1", port: int = 4200, timeout_s: float = 120, log: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """Start the server in the background in a process group of its own, wait until it answers, record it;
    returns (process, API URL). ``stop_group(proc.pid)`` stops it and whatever it started."""
    url = api_url(host, port)
    if healthy(url):
        raise ConfError(f"something already answers at {url}: stop it or pick another --port")
    env = server_env(cache, host, port)
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 — the child keeps it
    proc = spawn_group(server_command(host, port), env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
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
            proc, url = start_server(cache, host=host, port=port, log=state_dir(cache) / "server.log")
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


def connect(cache: Path) -> str | None:
    """Point this process's Prefect client at the cache's server when one runs (call before Prefect is
    imported); returns the API URL in use, or None for Prefect's temporary server."""
    if url := os.environ.get("PREFECT_API_URL"):
        return url
    if url := find_server(cache):
        os.environ["PREFECT_API_URL"] = url
    return url
