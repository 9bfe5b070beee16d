"""Prefect's temporary API server, started so that a terminal's Ctrl-C stops the run and not the server under it.

With no ``PREFECT_API_URL``, Prefect starts a temporary server (``SubprocessASGIServer``: uvicorn as a plain child
process) the first time a flow reports to it. A terminal's Ctrl-C sends SIGINT to the whole foreground process
group, so that server died with the run's first KeyboardInterrupt, and the run — already recorded `interrupted` in
the catalog — then waited on Prefect's client retrying the dead API (measured: still running 60 s later; SIGINT to
the augdag process alone: exit 130 in 4 s).

So the run starts that same server itself, before the flow, in a session of its own (the terminal's signals reach
augdag only; at exit Prefect's own ``atexit`` hook stops it as before), with a watchdog thread in the server's
process that stops it (SIGTERM: uvicorn's graceful shutdown) once its parent is gone: a ``kill -9`` of augdag's group
no longer reaches a server in another session, and it must not outlive the run. A watchdog, not
``PR_SET_PDEATHSIG``: that fires when the *thread* that forked exits, and it needs a ``preexec_fn``, unsafe in a
process with threads.

And it serves Prefect's app behind `augdag server`'s guard (flows/ops/prefect_guard.py ``ephemeral_app``: a loopback
``Host`` only, no browser ``Origin``): Prefect's own temporary server answers any ``Host`` with CORS ``*`` for as
long as a run lasts (issue 48, defect 3). Prefect has no setting for any of this; this wraps its ``subprocess`` use
in the one module that starts the server and changes nothing else of Prefect's.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Run in the server's process before uvicorn: poll the parent every second; when it is gone (the process was
# re-parented), stop uvicorn as SIGTERM does. Then uvicorn's own entry point, with the command line Prefect gave.
WATCHDOG = """
import os, signal, sys, threading, time
parent = os.getppid()
def watch():
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=watch, name="augdag-parent-watchdog", daemon=True).start()
sys.argv = ["uvicorn", *sys.argv[1:]]
from uvicorn.main import main
main()
"""


PREFECT_FACTORY = "prefect.server.api.server:create_app"  # the app Prefect's command serves
GUARDED = "flows.ops.prefect_guard:ephemeral_app"  # the same app behind the guard `augdag server` uses


class DetachedSubprocess:
    """``subprocess`` as the server module sees it: ``Popen`` of ``python -m uvicorn ...`` becomes the same command
    under the watchdog, in a new session; every other name is the real module's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args: list[str], **kwargs: Any) -> subprocess.Popen:  # noqa: N802 — subprocess's own name
        """The server's command in a new session, uvicorn's entry point run under the parent watchdog, serving
        Prefect's app behind flows/ops/prefect_guard.py's guard (loopback ``Host`` only, no ``Origin``)."""
        if list(args[1:3]) == ["-m", "uvicorn"]:
            rest = [GUARDED if a == PREFECT_FACTORY else a for a in args[3:]]
            args = [args[0], "-c", WATCHDOG, *rest]
        return subprocess.Popen(args, start_new_session=True, **kwargs)


def start_ephemeral_server(meanwhile: Callable[[], object] | None = None) -> str | None:
    """Start Prefect's temporary server for this process now, detached as above, unless a server is configured
    (``PREFECT_API_URL``) or the temporary one runs already; returns its API URL, or None when one is configured.
    Call it from the main thread, before the flow: Prefect's client then finds this one (a singleton per process).

    ``meanwhile`` (the nightly's model-stack import) runs in this thread while another waits for the server: the
    server is a child process coming up (~12 s, more on a new machine whose Prefect database is created and migrated
    then), during which this process had nothing to do. Prefect's server module is imported here first, so the two
    threads never import at once (flows/engine/imports.py says why that matters)."""
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        if meanwhile is not None:
            meanwhile()
        return None
    from prefect.server.api import server

    if not isinstance(server.subprocess, DetachedSubprocess):
        server.subprocess = DetachedSubprocess()  # the module's name for the subprocess module, nothing else
    ephemeral = server.SubprocessASGIServer()
    if meanwhile is None:
        ephemeral.start()  # a no-op when it runs
        return ephemeral.api_url
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefect-server-start") as pool:
        started = pool.submit(ephemeral.start)
        meanwhile()
        started.result()  # its error (a server that does not come up) as the call's
    return ephemeral.api_url
