"""``<cache>/reports`` over HTTP on loopback, read-only, while `augdag server` runs.

Browsers refuse the ``file://`` links of a page served over HTTP, so the report and plot links of the
Prefect UI point here (flows/engine/run_artifacts.py). GET and HEAD of regular files only: no directory listing,
no index page, nothing outside the reports directory, 404 for all of it; other methods get 501. Every
answered response carries ``X-Augdag-Reports: <the directory>``, so a client can tell this server from
whatever else answers on the port.

Hand-written, as no package does it (``openat2``'s ``RESOLVE_BENEATH`` is not in Python's ``os``): the
URL path is resolved one component at a time from a descriptor of the reports directory, each opened with
``O_NOFOLLOW`` relative to its parent's descriptor (``dir_fd``), ``..`` popped from our own stack and a
symbolic link read with ``readlink`` and walked the same way. Nothing is looked up by name twice, so a link
swapped in between a check and an open cannot lead out (issue 26, defect 10): a link or ``..`` that leaves
the directory is a 404. A NUL, a malformed ``%`` escape or a path that is not UTF-8 is a 400; a ``Host``
other than ``127.0.0.1``, ``localhost`` or ``[::1]`` (with any port) a 421, so a page of another site that
rebinds its name to 127.0.0.1 reads nothing. A client that hangs up mid-response is not an error.
"""

from __future__ import annotations

import errno
import mimetypes
import os
import re
import stat
import sys
import threading
import urllib.parse
from email.utils import formatdate
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

HEADER = "X-Augdag-Reports"
LOOPBACK_HOST = re.compile(r"(127\.0\.0\.1|localhost|\[::1\])(:\d{1,5})?")
BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
MAX_LINKS = 40  # as the kernel's ELOOP limit: a link cycle is a 404, not a hang
DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class Refused(Exception):
    """The path is not a regular file beneath the reports directory (404)."""


def url_parts(raw: str) -> list[str] | None:
    """The decoded path components of a request target, or None when it is not valid percent-encoded UTF-8
    or holds a NUL."""
    path = raw.split("?", 1)[0].split("#", 1)[0]  # not urlsplit: "//etc/passwd" is a path here, not a host
    if BAD_ESCAPE.search(path):
        return None
    try:
        text = urllib.parse.unquote(path, errors="strict")
    except UnicodeDecodeError:
        return None
    if "\x00" in text:
        return None
    return [p for p in text.split("/") if p not in ("", ".")]


def open_beneath(root: str, parts: list[str]) -> int:
    """A read-only descriptor of the regular file ``root/<parts>``, resolved beneath ``root`` only: every
    component opened with ``O_NOFOLLOW`` from its parent's descriptor, links followed by hand within ``root``.
    Raises ``Refused`` for anything else."""
    stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)]
    todo, links = list(reversed(parts)), 0
    try:
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) == 1:
                    raise Refused(name)
                os.close(stack.pop())
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=stack[-1])
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.EMLINK):  # ELOOP: the name is a link now
                    raise Refused(name) from None
                links += 1
                if links > MAX_LINKS:
                    raise Refused(name) from None
                try:
                    target = os.readlink(name, dir_fd=stack[-1])
                except OSError:
                    raise Refused(name) from None
                if target.startswith("/"):
                    inside = os.path.relpath(os.path.normpath(target), root)
                    if inside == ".." or inside.startswith("../"):
                        raise Refused(name) from None
                    while len(stack) > 1:
                        os.close(stack.pop())
                    target = inside
                todo.extend(reversed(target.split("/")))
                continue
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode) and todo:
                stack.append(fd)
                continue
            if stat.S_ISREG(mode) and not todo:
                os.set_blocking(fd, True)
                return fd
            os.close(fd)
            raise Refused(name)
        raise Refused("/")  # the directory itself
    finally:
        for fd in stack:
            os.close(fd)


class ReportsHandler(SimpleHTTPRequestHandler):
    def parse_request(self) -> bool:
        """Parse the request as the base class does, then refuse a ``Host`` other than loopback (421; 400 when
        missing)."""
        if not super().parse_request():
            return False
        host = (self.headers.get("Host") or "").strip().lower()
        if LOOPBACK_HOST.fullmatch(host):
            return True
        self.refused_host = True
        self.send_error(421 if host else 400, "Host must be 127.0.0.1, localhost or [::1]")
        return False

    def send_head(self) -> BinaryIO | None:
        """Open the regular file the path names beneath the reports directory and send its headers (400 for a
        malformed path, 404 for anything but a regular file beneath it); returns the open file, or None."""
        parts = url_parts(self.path)
        if parts is None:
            self.send_error(400, "Bad percent-encoding or NUL in the path")
            return None
        try:
            fd = open_beneath(self.directory, parts)
        except Refused:
            self.send_error(404, "File not found")
            return None
        f = os.fdopen(fd, "rb")
        st = os.fstat(fd)
        self.send_response(200)
        self.send_header("Content-Type", mimetypes.guess_type(parts[-1])[0] or "application/octet-stream")
        self.send_header("Content-Length", str(st.st_size))
        self.send_header("Last-Modified", formatdate(st.st_mtime, usegmt=True))
        self.end_headers()
        return f

    def list_directory(self, path: Any) -> None:  # never reached (send_head refuses directories): kept shut
        """Answer 404: no directory is ever listed."""
        self.send_error(404, "File not found")

    def end_headers(self) -> None:
        """Add ``X-Augdag-Reports`` (not on a refused host), ``Cache-Control: no-store`` and ``nosniff`` before
        ending the headers."""
        if not getattr(self, "refused_host", False):  # another site's page learns nothing, not even the path
            self.send_header(HEADER, self.directory)
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing: no access log on the server's terminal."""
        pass  # the UI fetches a page at a time: no access log on the server's terminal


class ReportsServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Report a request's error as the base class does, except a client that hung up mid-response."""
        if not isinstance(sys.exc_info()[1], DISCONNECTS):  # the browser left mid-page: nothing to say
            super().handle_error(request, client_address)


def serve_reports(reports: Path, port: int) -> ThreadingHTTPServer:
    """Serve ``reports`` on 127.0.0.1:``port`` from a daemon thread; ``shutdown()`` stops it."""
    reports.mkdir(parents=True, exist_ok=True)
    handler = partial(ReportsHandler, directory=os.path.realpath(reports))
    httpd = ReportsServer(("127.0.0.1", port), handler)
    threading.Thread(target=httpd.serve_forever, name="reports-http", daemon=True).start()
    return httpd
