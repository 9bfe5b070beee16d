"""A warm fairseq process: each training a fork of one process that has imported fairseq already.

A fairseq training in a fresh interpreter spends ~5 s (alone; 10-20 s on 2 busy cores) before its first update:
the interpreter, torch, fairseq with every one of its tasks (scikit-learn among them) and torch._dynamo (the
first optimizer imports it). The demo trains six models and a test run dozens, so the zygote pays that once
per augdag process: one child interpreter (this module's ``_ZYGOTE``) imports them, then forks once per
training. Each fork gets the job's environment, its thread count (``torch.set_num_threads``: the zygote's
OpenMP runtime was set up before any job) and a pipe for its output, and runs fairseq's CLIs as ``python -m``
would; its last line carries its exit code. A fork shares nothing with another job: fairseq seeds its own
RNGs from ``--seed``, and the zygote never runs an operator (no thread pool, no CUDA context to inherit).

A job may instead call a function of augdag's (``in_fork``: a slot tagger's or a C2C generator's training when
several train at once): the function and its arguments are pickled into a file, its result or its exception into
another, and the fork runs it with the torch thread count the augdag process would have given it, so it computes
the same bytes as there (tests/models/test_in_fork.py), without taking turns on that process' lock and GIL.

Hand-written: ``multiprocessing``'s forkserver neither takes an environment for the server nor streams a
child's output line by line. The zygote and its forks stay in augdag's process group (a ``kill -9`` of the
group ends them); the zygote exits when its augdag process closes the socket.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from conf.errors import ModelError
from models.runtime import torch_threads, with_threads

T = TypeVar("T")
_LOG = logging.getLogger("augdag.fork")
LOG_TAIL = 20  # output lines quoted when a call fails without a result

EXIT_MARK = "\0augdag-fairseq-exit "  # the fork's last line: EXIT_MARK + its exit code
PRELOAD = ("fairseq_cli.preprocess", "fairseq_cli.train", "torch._dynamo")

_ZYGOTE = r"""import importlib, json, os, signal, socket, sys, traceback
sock = socket.socket(fileno=int(sys.argv[1]))
for name in json.loads(sys.argv[2]):  # best effort: a fork imports again what failed here, and reports it
    try:
        importlib.import_module(name)
    except Exception:
        pass
torch = sys.modules.get("torch")
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel: nobody waits for them here
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 22, 1)
    if not msg:
        os._exit(0)  # augdag closed the socket
    job = json.loads(msg)
    sys.stdout.flush(); sys.stderr.flush()
    if os.fork() == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        os.dup2(fds[0], 1); os.dup2(fds[0], 2); os.close(fds[0])
        sys.stdout.reconfigure(line_buffering=True); sys.stderr.reconfigure(line_buffering=True)
        code = 1
        try:
            os.environ.clear(); os.environ.update(job["env"])
            if torch is not None:
                torch.set_num_threads(job["threads"])
            if job["allowed"]:
                import torch  # fairseq's torch.load (weights_only) of augdag's own checkpoint: its allow-list
                allowed = [getattr(importlib.import_module(m), n) for m, n in job["allowed"]]
                torch.serialization.add_safe_globals(allowed)
            for step in job["steps"]:
                print("augdag: python -m", " ".join(step), flush=True)
                sys.argv = step
                importlib.import_module(step[0]).cli_main()
            if job.get("call"):  # a function and its arguments pickled in one file, its result in another
                import pickle
                given, result = job["call"]
                with open(given, "rb") as f:
                    fn, args, kwargs = pickle.load(f)
                try:
                    out = (True, fn(*args, **kwargs))
                except Exception as e:
                    traceback.print_exc()
                    out = (False, e)
                with open(result, "wb") as f:
                    try:
                        pickle.dump(out, f)
                    except Exception:  # an exception (or result) that does not pickle: its text
                        f.seek(0); f.truncate(); pickle.dump((False, RuntimeError(repr(out[1]))), f)
                if not out[0]:
                    raise SystemExit(1)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.write(1, ("\n%s%d\n" % (EXIT_MARK, code)).encode())
            os._exit(code)
    os.close(fds[0])
""".replace("EXIT_MARK", repr(EXIT_MARK))


class Zygote:
    """A warm process that imported ``preload``, started on first use (with the first job's environment) and again
    if it died; ``zygote()`` is this augdag process' one for fairseq."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD) -> None:
        self.preload = preload
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None

    def _started(self, env: dict[str, str]) -> socket.socket:
        if self._proc is None or self._proc.poll() is not None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", _ZYGOTE, str(theirs.fileno()), json.dumps(self.preload)],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )
            if self._sock is not None:
                self._sock.close()
            self._sock = ours
        assert self._sock is not None
        return self._sock

    def start(self, env: dict[str, str]) -> None:
        """Start the warm process now (with ``env``) unless it runs: its imports overlap with the caller's work
        instead of delaying the first job. A job's own environment still applies in its fork."""
        with self._lock:
            self._started(env)

    def run(
        self,
        steps: list[list[str]],
        *,
        env: dict[str, str],
        threads: int,
        allowed: list[list[str]],
        on_line: Callable[[str], None],
        call: list[str] | None = None,
    ) -> int | None:
        """Run fairseq CLI modules (``[module, *args]`` each) in a fork, then ``call`` (``call``'s two files: what
        ``call`` below writes), each line of its output (stdout and stderr) to ``on_line`` as it comes; its exit
        code (``None``: it died without one, e.g. killed)."""
        job = json.dumps({"steps": steps, "env": env, "threads": threads, "allowed": allowed, "call": call}).encode()
        read_fd, write_fd = os.pipe()
        try:
            with self._lock:
                try:
                    socket.send_fds(self._started(env), [job], [write_fd])
                except OSError:  # the zygote died between two jobs: once more with a new one
                    self._proc = None
                    socket.send_fds(self._started(env), [job], [write_fd])
        finally:
            os.close(write_fd)
        held = None  # each line is held back one line: the empty one before the exit mark is not output
        with open(read_fd, encoding="utf-8", errors="replace") as out:
            for line in out:
                if line.startswith(EXIT_MARK):
                    return int(line[len(EXIT_MARK) :])
                if held is not None:
                    on_line(held)
                held = line.rstrip("\n")
        if held:
            on_line(held)
        return None

    def call(
        self,
        fn: Callable[..., T],
        args: tuple,
        kwargs: dict[str, Any],
        *,
        threads: int,
        on_line: Callable[[str], None],
        what: str | None = None,
    ) -> T:
        """``fn(*args, **kwargs)`` in a fork, torch on ``threads`` threads there: its result, or the exception it
        raised, raised here. ``fn`` is a module-level function; it, its arguments and its result are pickled
        (through a temporary directory, not the socket: a training set may be larger than a message). ``what``
        names the call in an error (default: ``fn``'s name)."""
        tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)

        def each(line: str) -> None:
            tail.append(line)
            on_line(line)

        with tempfile.TemporaryDirectory(prefix="augdag-fork-") as tmp:
            given, result = os.path.join(tmp, "call.pickle"), os.path.join(tmp, "result.pickle")
            with open(given, "wb") as f:
                pickle.dump((fn, args, kwargs), f, protocol=pickle.HIGHEST_PROTOCOL)
            code = self.run([], env=training_env(threads), threads=threads, allowed=[], on_line=each, call=[given, result])
            try:
                with open(result, "rb") as f:
                    ok, value = pickle.load(f)
            except (OSError, EOFError, pickle.UnpicklingError):
                how = "ended without an exit code (killed?)" if code is None else f"failed with exit code {code}"
                msg = f"{what or fn.__qualname__} in a fork {how}; its last {len(tail)} output lines:\n" + "\n".join(tail)
                raise ModelError(msg) from None
        if not ok:
            raise value
        return value


_ZYGOTE_OF_PROCESS = Zygote()


def zygote() -> Zygote:
    """This process' warm fairseq process."""
    return _ZYGOTE_OF_PROCESS


def training_env(threads: int) -> dict[str, str]:
    """A training process' environment: its thread count, unbuffered output, and OpenMP threads that sleep rather
    than spin while they wait (unless set already): on 2 busy cores, spinning made a tiny model's 2-thread updates 9x
    slower than with ``OMP_WAIT_POLICY=PASSIVE``. OpenMP reads the policy when a process loads it, so the warm process
    is started in it whichever training comes first."""
    n = str(threads or len(os.sched_getaffinity(0)))
    return {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "PYTHONUNBUFFERED": "1"}


def in_fork(fn: Callable[..., T], *args: Any, threads: int = 0, **kwargs: Any) -> T:
    """``fn(*args, threads=threads, **kwargs)`` (a model's training; ``threads``: the CPU threads it asks for) in a
    fork of this process' warm process, with the torch thread count it would get here (``models.runtime
    .torch_threads``: the run's, when one is fixed), so it computes what it would compute here; its output lines
    go to the logger ``augdag.fork``. Trainings in forks run side by side: here they take turns on
    ``models.runtime.STATE`` (their steps draw from torch's global generators) and the GIL."""
    n = torch_threads(threads)
    zygote().start(training_env(n))  # a no-op when it runs
    given = {**kwargs, "threads": threads}
    return zygote().call(with_threads, (n, fn, *args), given, threads=n, on_line=_LOG.info, what=fn.__qualname__)
