"""The warm fairseq process (models/nmt/fairseq_zygote.py): each job a fork with its own environment, thread count
and output; exit codes, a fork killed without one, a zygote replaced when it died, and a fork that trains the very
weights a fresh interpreter trains."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest

from conf.schema import NMTTrainConf
from models.nmt import fairseq_train
from models.nmt.fairseq_zygote import Zygote
from tests.conftest import REPO

PROBE = "tests.fixtures.zygote_probe"


def probe(zygote: Zygote, *args: str, threads: int = 1, value: str = "x") -> tuple[int | None, list[str]]:
    lines: list[str] = []
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUGDAG_PROBE": value}
    code = zygote.run([[PROBE, *args]], env=env, threads=threads, allowed=[], on_line=lines.append)
    return code, lines


def fields(line: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)


@pytest.fixture
def zygote():
    z = Zygote(preload=("torch",))
    yield z
    if z._proc is not None:
        z._proc.kill()
        z._proc.wait()


def test_each_job_is_a_fork_of_one_zygote_with_its_own_environment_threads_and_output(zygote):
    code_a, a = probe(zygote, "--one", threads=1, value="first")
    code_b, b = probe(zygote, "--two", threads=2, value="second")
    assert (code_a, code_b) == (0, 0)
    assert a[0] == f"augdag: python -m {PROBE} --one" and len(a) == len(b) == 2
    fa, fb = fields(a[1]), fields(b[1])
    assert (fa["env"], fa["threads"], fa["argv"]) == ("first", "1", "['--one']")
    assert (fb["env"], fb["threads"], fb["argv"]) == ("second", "2", "['--two']")
    assert fa["ppid"] == fb["ppid"] == str(zygote._proc.pid) and fa["pid"] != fb["pid"]


def test_exit_codes_a_killed_fork_and_a_dead_zygote(zygote):
    assert probe(zygote, "--fail")[0] == 3
    code, lines = probe(zygote, "--die")
    assert code is None and lines[0].endswith("--die")  # killed before it could report one
    first = zygote._proc.pid
    os.kill(first, signal.SIGKILL)
    zygote._proc.wait()
    code, lines = probe(zygote)
    assert code == 0 and fields(lines[1])["ppid"] == str(zygote._proc.pid) != str(first)


def test_a_missing_module_is_its_traceback_and_exit_code_1(zygote):
    code, lines = probe(zygote)  # the zygote started
    lines = []
    code = zygote.run([["augdag_no_such_module"]], env=dict(os.environ), threads=1, allowed=[], on_line=lines.append)
    assert code == 1 and lines[-1] == "ModuleNotFoundError: No module named 'augdag_no_such_module'"


_FRESH = """import importlib, json, sys
for step in json.loads(sys.argv[1]):
    sys.argv = step
    importlib.import_module(step[0]).cli_main()
"""


class FreshInterpreter:
    """The reference: fairseq's CLIs in a new interpreter, as `python -m` runs them (no zygote)."""

    def run(self, steps, *, env, threads, allowed, on_line):
        assert not allowed
        proc = subprocess.run(
            [sys.executable, "-c", _FRESH, json.dumps(steps)], check=False, env=env, capture_output=True, text=True, timeout=600
        )
        for line in (proc.stdout + proc.stderr).splitlines():
            on_line(line)
        return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("threads", [2])
def test_a_fork_trains_the_weights_a_fresh_interpreter_trains(tmp_path, monkeypatch, threads):
    torch = pytest.importorskip("torch")
    r = random.Random(0)
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "rug", "near", "far", "home", "town", "river", "sea"]
    src = [" ".join(r.choice(words) for _ in range(6)) for _ in range(200)]
    tgt = [s.upper() for s in src]
    conf = NMTTrainConf.model_validate({"max_update": 8, "vocab_size": 60, "seed": 3})
    forked = fairseq_train.train_fairseq(src, tgt, tmp_path / "forked", conf, log=lambda _: None, threads=threads)
    monkeypatch.setattr(fairseq_train, "zygote", FreshInterpreter)
    fresh = fairseq_train.train_fairseq(src, tgt, tmp_path / "fresh", conf, log=lambda _: None, threads=threads)
    a, b = (torch.load(d / "checkpoint.pt", map_location="cpu", weights_only=False)["model"] for d in (forked, fresh))
    assert a.keys() == b.keys() and len(a) > 50
    assert [k for k in a if not torch.equal(a[k], b[k])] == []  # bit for bit: same threads, same seed, same draws


def test_a_zygote_started_ahead_serves_the_next_job_in_that_jobs_environment(zygote):
    zygote.start({**os.environ, "PYTHONPATH": str(REPO), "AUGDAG_PROBE": "at start"})
    first = zygote._proc.pid
    zygote.start({**os.environ, "AUGDAG_PROBE": "ignored: it runs"})
    code, lines = probe(zygote, "--one", value="the_job")
    assert code == 0 and zygote._proc.pid == first
    assert fields(lines[1])["env"] == "the_job" and fields(lines[1])["ppid"] == str(first)
