"""``<cache>/reports`` over HTTP on loopback, read-only, while `augdag server` runs.

Browsers refuse the ``file://`` links of a page served over HTTP, so the report and plot links of the
Prefect UI point here (flows/run_artifacts.py). GET and HEAD of files only: no directory listing, no
index page, nothing outside the reports directory (``..`` is dropped from the path, and a symbolic
link that leads out is refused), 404 for all of it; other methods get 501. Every response carries
``X-Augdag-Reports: <the directory>``, so a client can tell this server from whatever else answers on
the port.
"""

from __future__ import annotations

import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HEADER = "X-Augdag-Reports"


class ReportsHandler(SimpleHTTPRequestHandler):
    def send_head(self) -> Any:
        root = Path(self.directory).resolve()
        path = Path(self.translate_path(self.path))
        try:
            inside = path.resolve().is_relative_to(root) and path.resolve().is_file()
        except OSError:
            inside = False
        if not inside:
            self.send_error(404, "File not found")
            return None
        return super().send_head()

    def list_directory(self, path: Any) -> None:  # never reached (send_head refuses directories): kept shut
        self.send_error(404, "File not found")

    def end_headers(self) -> None:
        self.send_header(HEADER, str(Path(self.directory).resolve()))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the UI fetches a page at a time: no access log on the server's terminal


def serve_reports(reports: Path, port: int) -> ThreadingHTTPServer:
    """Serve ``reports`` on 127.0.0.1:``port`` from a daemon thread; ``shutdown()`` stops it."""
    reports.mkdir(parents=True, exist_ok=True)
    handler = partial(ReportsHandler, directory=str(reports.resolve()))
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="reports-http", daemon=True).start()
    return httpd
