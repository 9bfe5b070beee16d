"""The local Prefect server and UI of a cache: started by `augdag server`, found by every other command.

`augdag server` runs ``prefect server start`` with ``PREFECT_HOME`` under ``<cache>/server`` (so its
SQLite database, ``prefect.db``, lives beside the cache it describes) on 127.0.0.1:4200 unless told
otherwise, and records its address in ``<cache>/server/server.json``. `augdag run`, `nightly`,
`demo` and `retry` report to that server when it answers, so their flow runs, task runs per stage and
shard, and artifacts show in its UI; without one they use Prefect's temporary in-process server.
``PREFECT_API_URL``, when set, always wins.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from conf.errors import ConfError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def state_dir(cache: Path) -> Path:
    return Path(cache).absolute() / "server"


def api_url(host: str, port: int) -> str:
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/api"


def healthy(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as r:  # noqa: S310 — our own loopback URL
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        if proc is not None and proc.poll() is not None:
            raise ConfError(f"the Prefect server exited with code {proc.returncode} before answering at {url}")
        if time.monotonic() > deadline:
            raise ConfError(f"the Prefect server did not answer at {url}/health within {timeout_s:.0f} s")
        time.sleep(0.5)


def server_command(host: str, port: int) -> list[str]:
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


def start_server(cache: Path, *, host: str = "127.0.0.1", port: int = 4200, timeout_s: float = 120,
                 log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start the server in the background, wait until it answers, record it; returns (process, API URL)."""
    url = api_url(host, port)
    if healthy(url):
        raise ConfError(f"something already answers at {url}: stop it or pick another --port")
    env = server_env(cache, host, port)
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 — the child keeps it
    proc = subprocess.Popen(server_command(host, port), env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        wait_healthy(url, timeout_s, proc)
    except BaseException:
        proc.terminate()
        raise
    record(cache, url, proc.pid)
    return proc, url


def record(cache: Path, url: str, pid: int) -> None:
    (state_dir(cache) / "server.json").write_text(json.dumps({"url": url, "pid": pid}), encoding="utf-8")


def forget(cache: Path) -> None:
    (state_dir(cache) / "server.json").unlink(missing_ok=True)


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
