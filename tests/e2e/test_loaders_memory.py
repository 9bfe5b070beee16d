"""augdag.torch streams: its peak memory does not grow with the view's size (issue 49). In e2e: a subprocess that
imports torch (~4 s)."""

from __future__ import annotations

import subprocess
import sys

from tests.api.test_loaders import write_parts
from tests.conftest import REPO, subprocess_env

# the peak from /proc/self/status VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over fork and exec, so a
# subprocess of a large pytest process would report pytest's peak at both sizes
PEAK_RSS = """
from augdag.torch import torch_dataset
for paths in ({small}, {large}):
    ds = torch_dataset(paths, batch_size=256, shuffle_seed=1, shuffle_buffer=1024)
    rows = sum(len(b["n"]) for b in ds)
    peak_kb = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
    print(rows, peak_kb // 1024, flush=True)
"""


def test_torch_dataset_peak_rss_is_flat_in_the_views_size(tmp_path):
    """The 10x view (20,000 rows of 4 KB: ~80 MB as Arrow) read after the 1x one raises the peak by under 32 MB
    (holding it would add over 80 MB; a shuffle buffer as large as the view added ~300 MB)."""
    small = write_parts(tmp_path / "small", sizes=(500,) * 4, row_group_size=125, pad=4000)
    large = write_parts(tmp_path / "large", sizes=(500,) * 40, row_group_size=125, pad=4000)
    code = PEAK_RSS.format(small=[str(p) for p in small], large=[str(p) for p in large])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=subprocess_env(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    (rows_1, peak_1), (rows_10, peak_10) = (map(int, line.split()) for line in out.stdout.split("\n")[:2])
    assert (rows_1, rows_10) == (2_000, 20_000)
    assert peak_10 - peak_1 < 32, f"peak RSS {peak_1} MB at 1x, {peak_10} MB at 10x"
