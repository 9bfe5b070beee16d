"""Write the test session's bytecode and the aligner's numba cache once, before pytest-xdist starts its workers:
``python -m tests.warm`` (the Makefile's ``test`` and ``test-e2e`` run it first). Does nothing when both are there.

A fresh clone in a fresh virtual environment has no ``.pyc`` files (uv installs without them; the Makefile's comment
on bytecode says why). Each process then compiles what it imports, and the processes a test session starts at once
compile the same files side by side: both xdist workers import torch, transformers, datasets and numba to collect the
tests (17.6 CPU-s of compiling each, `pytest --collect-only` 26 CPU-s fresh against 8.5 warm), then Prefect's server,
fairseq and the rest; one test of the rejuvenation flow took 87 CPU-s in a fresh environment against 43 in a warm one.
Here two processes compile those packages, each its half, in parallel, and the workers read the result.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

# two halves of about equal compile time, each imported by one process in order; the second then collects the tests
# (pytest writes their rewritten bytecode; the collection imports torch too, compiled by the first half by then)
HALVES: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("torch", "fairseq", "fairseq.models.transformer", "fairseq.sequence_generator", "transformers", "datasets"),
    ("prefect", "prefect.server.api.server", "prefect.testing.utilities", "flows", "numba", "sacrebleu", "xdist"),
)
COLLECT = "import pytest, sys; sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests']))"
# the aligner's numba kernels, compiled into their cache (models/aligner/__pycache__) by a tiny alignment: 11 CPU-s
# fresh, 1.7 from the cache; the rejuvenation and self-training flows, the tiny demo and the `augdag run`s that align
# would each compile them until one had written it
NUMBA = (
    "from models.aligner import symmetrize; import pyarrow as pa; "
    "symmetrize(pa.array(['a b c', 'b c d', 'a d'] * 3), pa.array(['x y z', 'y z w', 'x w'] * 3))"
)


def compiled(module: str) -> bool:
    """Whether ``module``'s own file has its bytecode written (a cheap look: nothing is imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return True
    try:
        with open(importlib.util.cache_from_source(spec.origin), "rb"):
            return True
    except OSError:
        return False


def main() -> int:
    tops = [half[0] for half in HALVES] + ["transformers"]
    kernels = Path(__file__).resolve().parents[1] / "models" / "aligner" / "__pycache__"
    if all(compiled(m) for m in tops) and any(kernels.glob("*.nbi")):
        return 0
    t0 = time.perf_counter()
    scripts = ["import " + ", ".join(HALVES[0]) + "; " + NUMBA, "import " + ", ".join(HALVES[1]) + "; " + COLLECT]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([sys.executable, "-c", s], **quiet) for s in scripts]
    failed = [half[0] for half, p in zip(HALVES, procs) if p.wait() != 0]
    if failed:  # the tests will say why; this step only saves time
        print(f"tests.warm: importing {', '.join(failed)} failed (the tests will compile it)", file=sys.stderr)
    print(f"tests.warm: a fresh environment's bytecode and numba cache, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
