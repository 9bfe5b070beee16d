"""Killed and resumed: N demo nightlies SIGKILLed at random moments, each resumed, against one run never killed.

Reference: `augdag nightly --config demo` into an empty cache, uninterrupted and timed (T). ``--profile tiny``
(the default) adds demo/tiny.py's overrides: every pipeline of the demo at once, at tiny sizes; ``--profile
demo`` is the full demo. Each trial starts the same command into a fresh cache in a session of its own, kills
its whole process group with SIGKILL at a moment t drawn uniformly in (0, T) (``--seed``), placed on the trial's
own progress: the reference ran k Parquet files by t, its k-th d seconds before t, so the trial is killed d seconds
after its own k-th file. A moment in seconds alone let a trial that ran faster than the reference finish before
it; this one lands in the same stage, whatever the machine's speed that day. Then it runs the same command again
over that cache (the resume: finished shards are cached) and checks that

  - every Parquet file under ``artifacts/`` has the reference's sha256, and the set of paths is the same;
  - every evaluation score (model, arm, test set, metric, seed) of the resumed nightly equals the reference's,
    and so does every one the killed run's finished pipelines recorded before the kill;
  - no run is left ``running`` in the catalog (the killed one shows crashed);
  - no process of the killed run (its group, and every process below it at the kill) or of the resume is left;
  - `augdag sql` against the catalog, every 2 s while a run writes it (the reference, and each trial's first
    run until the kill), always answers.

All runs read one demo data directory (the reference run writes it) and each trial has a Prefect home of its
own. Prints one line per trial and ``N/N identical``, the first differing artifact of a trial that is not;
exits 1 unless every trial is identical. Hand-written: no package kills a pipeline at random moments and
compares what its resume leaves byte for byte.

    .venv/bin/python bench/chaos.py --trials 20                  # tiny: a nightly is 100-150 s on 2 cores
    .venv/bin/python bench/chaos.py --trials 3 --profile demo    # the full demo (~300 MB of cache per run)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from bench.common import workdir
from demo.tiny import TINY_SETS
from storage.artifacts import hash_file
from storage.catalog import DB, Catalog
from storage.processes import Owner, descendants, group_members, owner_alive, started

REPO = Path(__file__).resolve().parent.parent
READ_EVERY_S = 2.0  # from one reader's end to the next one's start (a reader costs ~1.5 s of one core)
READ_TIMEOUT_S = 120
POLL_S = 0.05  # how often a trial counts its committed files
GONE_WAIT_S = 10.0  # how long a run's processes may take to disappear after its end or its kill
RUN_TIMEOUT_S = 6 * 3600  # the reference run; a resume gets max(1800 s, 3 T)
# the evaluations' identity and score; of a tuple of names, the first one the catalog has
SCORE_COLUMNS: tuple[tuple[str, ...], ...] = (
    ("model_name",),
    ("arm",),
    ("dataset", "testset"),
    ("metric",),
    ("seed",),
    ("score",),
)


@dataclasses.dataclass
class Snapshot:
    """What a finished cache holds: Parquet sha256 by path (relative to the cache), and the evaluations' rows."""

    hashes: dict[str, str]
    scores: list[tuple]  # the last completed nightly's
    every_score: list[tuple]  # every distinct one in the catalog


@dataclasses.dataclass
class Outcome:
    """One nightly command: its exit status (None: killed or timed out), seconds, processes left, readers."""

    rc: int | None
    seconds: float
    left: list[int]
    readers: Readers | None = None


class Readers:
    """`augdag sql` against the cache's catalog every READ_EVERY_S in a thread, counting answers and failures;
    none before the run has created the catalog."""

    def __init__(self, cache: Path, env: dict[str, str]) -> None:
        self.cache, self.env = cache, env
        self.ok = self.failed = 0
        self.first_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No new reader; waits for the one under way (it counts)."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(READ_EVERY_S):
            if (self.cache / DB).exists():
                self._read()

    def _read(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "flows.cli",
            "sql",
            "SELECT count(*) AS n FROM artifacts",
            "-f",
            "csv",
            "--cache",
            str(self.cache),
        ]
        try:
            proc = subprocess.run(
                cmd, env=self.env, cwd=REPO, capture_output=True, text=True, check=False, timeout=READ_TIMEOUT_S
            )
            error = "" if proc.returncode == 0 else f"exit {proc.returncode}: {last_line(proc.stderr + proc.stdout)}"
        except subprocess.TimeoutExpired:
            error = f"no answer in {READ_TIMEOUT_S} s"
        if error:
            self.failed += 1
            self.first_error = self.first_error or error
        else:
            self.ok += 1

    def summary(self) -> str:
        n = self.ok + self.failed
        return f"readers {self.ok}/{n} ok" + (f" (first failure: {self.first_error})" if self.failed else "")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def nightly_env(prefect_home: Path, data: Path) -> dict[str, str]:
    """This environment without any Prefect API or storage setting (each run starts its own temporary Prefect),
    with its own Prefect home and the shared demo data."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PREFECT_LOCAL_STORAGE"))}
    env.update(PREFECT_HOME=str(prefect_home), AUGDAG_DEMO_DATA=str(data), PYTHONPATH=str(REPO), COLUMNS="200")
    return env


def nightly_cmd(cache: Path, sets: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "flows.cli",
        "nightly",
        "--config",
        "demo",
        *(a for s in sets for a in ("--set", s)),
        "--cache",
        str(cache),
        "-q",
    ]


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """The command in a session of its own (its process group id is its pid), its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def family(pid: int) -> list[Owner]:
    """``pid`` and every process below it now, each named for good (pid and start time)."""
    host = socket.gethostname()
    return [Owner(host, p, s) for p in (pid, *descendants(pid)) if (s := started(p)) is not None]


def left_over(pgid: int, owners: Sequence[Owner] = ()) -> list[int]:
    """The living processes of group ``pgid`` and of ``owners`` still there after up to GONE_WAIT_S."""
    deadline = time.monotonic() + GONE_WAIT_S
    while True:
        alive = sorted(set(group_members(pgid)) | {o.pid for o in owners if owner_alive(o)})
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def kill_group(proc: subprocess.Popen) -> list[Owner]:
    """SIGKILL the process group of ``proc`` and reap its leader; the processes it had just before."""
    owners = family(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return owners


def run_once(
    cmd: list[str],
    env: dict[str, str],
    log: Path,
    limit_s: float,
    readers: Readers | None = None,
    kill_when: Callable[[], bool] | None = None,
) -> Outcome:
    """Run ``cmd`` until it ends, or until ``limit_s`` seconds after its start or ``kill_when()`` (asked every
    POLL_S): then SIGKILL its process group (rc None). ``readers`` read meanwhile and stop at its end."""
    with readers or contextlib.nullcontext():
        t0 = time.perf_counter()
        proc = start(cmd, env, log)
        rc, owners = None, []
        while True:
            try:
                rc = proc.wait(timeout=min(POLL_S, max(0.0, limit_s - (time.perf_counter() - t0))))
                break
            except subprocess.TimeoutExpired:
                if time.perf_counter() - t0 >= limit_s or (kill_when is not None and kill_when()):
                    owners = kill_group(proc)
                    break
        seconds = time.perf_counter() - t0
    return Outcome(rc, seconds, left_over(proc.pid, owners), readers)


def parquet_count(cache: Path) -> int:
    """Committed Parquet files under the cache's artifacts (a part under its temporary name does not count)."""
    return sum(1 for p in (cache / "artifacts").rglob("*.parquet") if not p.name.startswith("."))


class Progress:
    """The reference run's progress: when its cache first held k committed Parquet files, for each k."""

    def __init__(self, cache: Path) -> None:
        self.cache, self.t0, self.reached = cache, time.perf_counter(), {0: 0.0}

    def watch(self) -> bool:
        """A ``kill_when`` that never kills: it records each new count and the moment it was reached."""
        n = parquet_count(self.cache)
        if n > max(self.reached):
            self.reached[n] = time.perf_counter() - self.t0
        return False

    def kill_point(self, at_s: float) -> tuple[int, float]:
        """The moment ``at_s`` of the reference as (k, d): d seconds after its k-th file was committed."""
        k = max(n for n, t in self.reached.items() if t <= at_s)
        return k, at_s - self.reached[k]


class KillAfter:
    """A trial's ``kill_when``: true ``delay_s`` after its cache first holds ``files`` committed Parquet files,
    the moment of the reference it was drawn from, placed on this run's own progress."""

    def __init__(self, cache: Path, files: int, delay_s: float) -> None:
        self.cache, self.files, self.delay_s, self.since = cache, files, delay_s, None

    def __call__(self) -> bool:
        if self.since is None and parquet_count(self.cache) >= self.files:
            self.since = time.perf_counter()
        return self.since is not None and time.perf_counter() - self.since >= self.delay_s


def parquet_hashes(cache: Path) -> dict[str, str]:
    """Every Parquet file under the cache's artifacts, by path relative to the cache, with its sha256."""
    return {str(p.relative_to(cache)): hash_file(p) for p in sorted((cache / "artifacts").rglob("*.parquet"))}


def temp_files(cache: Path) -> int:
    """Files under a temporary name (storage.artifacts.temp_path) left in the artifacts: a kill's litter."""
    return sum(1 for _ in (cache / "artifacts").rglob(".*.tmp"))


def scores(cache: Path) -> tuple[list[tuple], list[tuple]]:
    """The evaluations' (model_name, arm, test set, metric, seed, score) rows, sorted, floats by their repr (NaN
    equals NaN, nothing else equals anything but itself): those of the last completed nightly's pipelines, and
    every distinct one in the catalog (a killed nightly's pipelines that completed recorded theirs too)."""
    with Catalog(cache).read() as con:
        present = {row[0] for row in con.execute("DESCRIBE evaluations").fetchall()}
        cols = ", ".join(next(c for c in names if c in present) for names in SCORE_COLUMNS if any(c in present for c in names))
        last = con.execute(
            "SELECT summary FROM runs WHERE pipeline = 'nightly' AND status = 'completed' ORDER BY finished_at DESC LIMIT 1"
        ).fetchone()
        ids = [c["run_id"] for c in json.loads(last[0]).get("pipelines", [])] if last and last[0] else []
        rows = con.execute(
            f"SELECT {cols} FROM evaluations WHERE list_contains($ids, run_id) ORDER BY ALL", {"ids": ids}
        ).fetchall()
        every = con.execute(f"SELECT DISTINCT {cols} FROM evaluations ORDER BY ALL").fetchall()
    exact = [tuple(repr(v) if isinstance(v, float) else v for v in row) for row in rows]
    return exact, sorted({tuple(repr(v) if isinstance(v, float) else v for v in row) for row in every}, key=repr)


def running_runs(cache: Path) -> list[tuple]:
    with Catalog(cache).read() as con:
        return con.execute("SELECT run_id, pipeline, status FROM runs WHERE status = 'running' ORDER BY ALL").fetchall()


def snapshot(cache: Path) -> Snapshot:
    return Snapshot(parquet_hashes(cache), *scores(cache))


def differences(ref: Snapshot, got: Snapshot) -> list[str]:
    """What differs, the first differing (or missing, or extra) Parquet file first; [] when identical."""
    problems = []
    paths = sorted(ref.hashes.keys() | got.hashes.keys())
    bad = [p for p in paths if ref.hashes.get(p) != got.hashes.get(p)]
    if bad:
        first = bad[0]
        how = "is missing" if first not in got.hashes else "is extra" if first not in ref.hashes else "differs"
        stages = sorted({Path(p).parts[1] for p in bad if len(Path(p).parts) > 1})
        problems.append(f"{first} {how} ({len(bad)} of {len(paths)} parquet files differ; stages {', '.join(stages)})")
    if got.scores != ref.scores:
        wrong = [(r, g) for r, g in zip(ref.scores, got.scores, strict=False) if r != g]
        detail = f"{wrong[0][1]} where the reference has {wrong[0][0]}" if wrong else "rows missing or extra"
        problems.append(f"scores differ ({len(got.scores)} rows, reference {len(ref.scores)}): {detail}")
    if other := sorted(set(got.every_score) - set(ref.every_score), key=repr):
        problems.append(f"{len(other)} scores recorded by an earlier (killed) run differ, the first {other[0]}")
    return problems


def run_problems(what: str, out: Outcome, log: Path, *, killed: bool = False) -> list[str]:
    """A run's own failures: its exit status (unless it was killed on purpose), processes left, readers."""
    problems = []
    if not killed and out.rc is None:
        problems.append(f"{what} timed out after {out.seconds:.0f} s (log {log})")
    elif not killed and out.rc != 0:
        problems.append(f"{what} exited {out.rc}: {last_line(log.read_text(errors='replace'))} (log {log})")
    if out.left:
        problems.append(f"{what}: processes left {out.left}")
    if out.readers is not None and out.readers.failed:
        problems.append(f"{what}: {out.readers.summary()}")
    return problems


def trial(
    i: int,
    n: int,
    at_s: float,
    progress: Progress,
    ref: Snapshot,
    ref_s: float,
    root: Path,
    sets: list[str],
    data: Path,
    reader_env: dict[str, str],
    *,
    keep: bool,
) -> bool:
    """One kill, at the reference's moment ``at_s`` placed on this run's progress, and resume; prints its line
    (and the problems after the first, indented); True if identical."""
    d = root / f"trial-{i:02d}"
    d.mkdir()
    cache, env = d / "cache", nightly_env(d / "prefect-home", data)
    cmd = nightly_cmd(cache, sets)
    files, delay_s = progress.kill_point(at_s)
    first = run_once(
        cmd, env, d / "run.log", max(1800.0, 3 * ref_s), Readers(cache, reader_env), kill_when=KillAfter(cache, files, delay_s)
    )
    killed = first.rc is None
    resume = run_once(cmd, env, d / "resume.log", max(1800.0, 3 * ref_s))
    problems = run_problems("killed run" if killed else "first run", first, d / "run.log", killed=killed)
    problems += run_problems("resume", resume, d / "resume.log")
    counts = ""
    if resume.rc == 0:
        got = snapshot(cache)
        counts = f" ({len(got.hashes)} parquet, {len(got.scores)} scores)"
        problems = differences(ref, got) + problems
        if running := running_runs(cache):
            problems.append(f"runs shown running after the resume: {running}")
        if litter := temp_files(cache):
            problems.append(f"{litter} temporary files left under artifacts/")
    point = f"{delay_s:.1f} s after its parquet file {files} of {len(ref.hashes)} (the reference's {at_s:.1f} s)"
    when = (
        f"killed at {first.seconds:.1f} s, {point}" if killed else f"finished in {first.seconds:.1f} s before its kill, {point}"
    )
    verdict = problems[0] if problems else f"identical{counts}"
    print(f"trial {i}/{n}: {when}, resumed in {resume.seconds:.1f} s: {verdict}, {first.readers.summary()}", flush=True)
    for p in problems[1:]:
        print(f"  {p}", flush=True)
    if not keep:
        shutil.rmtree(d / "cache", ignore_errors=True)
        shutil.rmtree(d / "prefect-home", ignore_errors=True)
    return not problems


def chaos(root: Path, a: argparse.Namespace) -> int:
    """The reference run, then ``a.trials`` trials; prints and returns the exit status."""
    sets = [*(TINY_SETS if a.profile == "tiny" else []), *a.set]
    data, reader_env = root / "data", nightly_env(root / "reader-prefect-home", root / "data")
    ref_dir = root / "reference"
    ref_dir.mkdir(parents=True)
    ref_cache, log = ref_dir / "cache", ref_dir / "run.log"
    progress = Progress(ref_cache)
    out = run_once(
        nightly_cmd(ref_cache, sets),
        nightly_env(ref_dir / "prefect-home", data),
        log,
        RUN_TIMEOUT_S,
        Readers(ref_cache, reader_env),
        kill_when=progress.watch,
    )
    problems = run_problems("reference", out, log)
    if not problems and (running := running_runs(ref_cache)):
        problems.append(f"reference: runs shown running: {running}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    ref = snapshot(ref_cache)
    extra = f", {' '.join(a.set)}" if a.set else ""
    print(
        f"reference ({a.profile}{extra}): {out.seconds:.1f} s, {len(ref.hashes)} parquet, {len(ref.scores)} scores, "
        f"{out.readers.summary()}",
        flush=True,
    )
    rng = random.Random(a.seed)
    ok = sum(
        trial(i, a.trials, rng.uniform(0, out.seconds), progress, ref, out.seconds, root, sets, data, reader_env, keep=a.keep)
        for i in range(1, a.trials + 1)
    )
    if not a.keep:
        shutil.rmtree(ref_dir / "cache", ignore_errors=True)
        shutil.rmtree(ref_dir / "prefect-home", ignore_errors=True)
    print(f"{ok}/{a.trials} identical", flush=True)
    return 0 if ok == a.trials else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument(
        "--profile",
        choices=("tiny", "demo"),
        default="tiny",
        help="tiny: the demo with demo/tiny.py's overrides (every pipeline at once); demo: the full demo",
    )
    ap.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    ap.add_argument(
        "--workdir",
        type=Path,
        help="where the data, caches and logs go (default: a new temporary directory, removed at the end unless --keep)",
    )
    ap.add_argument("--keep", action="store_true", help="keep every cache (else each is removed once compared)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another override (repeatable)")
    a = ap.parse_args(argv)
    if a.workdir is not None:
        a.workdir.mkdir(parents=True, exist_ok=True)
        root = Path(a.workdir).absolute()
        if (root / "reference").exists() or any(root.glob("trial-*")):
            ap.error(f"{root} holds an earlier chaos run's reference/ or trial-*/: give an empty --workdir")
        return chaos(root, a)
    with workdir("chaos", keep=a.keep) as root:
        if a.keep:
            print(f"workdir: {root}", flush=True)
        return chaos(root, a)


if __name__ == "__main__":
    sys.exit(main())
