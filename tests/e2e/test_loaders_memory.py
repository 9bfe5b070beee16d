"""augdag.torch streams: its peak memory does not grow with the view's size (issue 49). In e2e: a subprocess that
imports torch (~4 s)."""

from __future__ import annotations

import subprocess
import sys

from tests.api.test_loaders import write_parts
from tests.conftest import REPO, subprocess_env

# One fresh process per size, each reading the view through 2 DataLoader workers and then in this process: its peak
# from /proc/self/status VmHWM (getrusage's ru_maxrss is carried over fork and exec on Linux, so it would report
# the pytest process's peak), its workers' from RUSAGE_CHILDREN (they start from the process's RSS at the fork).
PEAK_RSS = """
import resource, sys
from augdag.torch import torch_dataset
paths = sys.argv[1:]
rows = []
for workers in (2, 0):
    ds = torch_dataset(paths, batch_size=128, shuffle_seed=1, shuffle_buffer=256)
    rows.append(sum(len(b["n"]) for b in (ds.loader(num_workers=workers) if workers else ds)))
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
print(*rows, peak // 1024, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def peaks(tmp_path, paths) -> tuple[int, int, int, int]:
    """(rows through the workers, rows in the process, its peak RSS in MB, its largest worker's)."""
    args = [sys.executable, "-c", PEAK_RSS, *map(str, paths)]
    out = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=subprocess_env(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    w_rows, rows, peak, workers = map(int, out.stdout.split())
    return w_rows, rows, peak, workers


def test_torch_dataset_peak_rss_is_flat_in_the_views_size(tmp_path):
    """The 10x view (20,000 rows of 8 KB: ~160 MB as Arrow) peaks under 48 MB above the 1x one, in the reading
    process and in its 2 DataLoader workers. Measured here: the process -15 to 0 MB; the workers +21 to +29 MB, the
    allocators warming up once (a 30x view peaked 4 MB under the 10x one); holding the view would add over 160 MB,
    and a shuffle buffer as large as the view added ~370 MB in the process and ~260 MB in the workers."""
    small = write_parts(tmp_path / "small", sizes=(500,) * 4, row_group_size=125, pad=8000)
    large = write_parts(tmp_path / "large", sizes=(500,) * 40, row_group_size=125, pad=8000)
    (w_rows_1, rows_1, peak_1, workers_1), (w_rows_10, rows_10, peak_10, workers_10) = (
        peaks(tmp_path, small),
        peaks(tmp_path, large),
    )
    assert (w_rows_1, rows_1, w_rows_10, rows_10) == (2_000, 2_000, 20_000, 20_000)
    assert peak_10 - peak_1 < 48, f"peak RSS {peak_1} MB at 1x, {peak_10} MB at 10x"
    assert workers_10 - workers_1 < 48, f"workers' peak RSS {workers_1} MB at 1x, {workers_10} MB at 10x"
