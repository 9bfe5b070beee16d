"""`make install`'s shape (issue 50, a faster install): the Python packages and the system ones are two chains that
`install` runs at once, and the Debian packages come in one apt-get call. `make -n` prints the recipes without
running them (a recipe that calls $(MAKE) runs, with -n passed on)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def dry_run(tmp_path: Path, *targets: str) -> str:
    """The commands `make -n TARGETS` would run for a venv at tmp_path/venv that does not exist yet."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", f"VENV={tmp_path}/venv", "FIND_LINKS=", "UV=uv", *targets],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_lmplz_build_waits_for_the_debian_packages_not_for_the_python_packages(tmp_path):
    commands = dry_run(tmp_path, f"{tmp_path}/venv/bin/lmplz").splitlines()
    assert commands == [
        "uv --version >/dev/null 2>&1 || python3 -m pip install -q uv",
        f"uv venv -q --allow-existing --python 3.11 {tmp_path}/venv",
        "scripts/install_debian.sh",
        f"scripts/build_kenlm.sh {tmp_path}/venv/bin",
    ]


def test_install_runs_both_chains_with_three_jobs_and_builds_no_wheelhouse(tmp_path):
    out = dry_run(tmp_path, "install")
    assert out.splitlines()[0] == "make --no-print-directory -j 3 install-parts"
    uv_install = [line for line in out.splitlines() if " uv pip install " in line]
    assert len(uv_install) == 1
    assert uv_install[0].startswith(  # fairseq-fixed's extensions in parallel, without ninja (a failing one first on PATH)
        f"DIST_EXTRA_CONFIG={tmp_path}/venv/build_ext.cfg PATH={tmp_path}/venv/build-bin:$PATH uv pip install -q --python "
    )
    assert "--find-links" not in uv_install[0]  # FIND_LINKS= above; no wheelhouse of our own
    for script in ("scripts/install_debian.sh", "scripts/install_wordnet.sh", f"scripts/build_kenlm.sh {tmp_path}/venv/bin"):
        assert out.count(script) == 1, script
    assert "build_wheelhouse" not in out


def packages_of(script: str) -> set[str]:
    """The Debian package names a script's PACKAGES=(...) array or `packages="..."` string lists."""
    text = (REPO / "scripts" / script).read_text()
    found = re.search(r"^PACKAGES=\((.*?)\)", text, re.S | re.M) or re.search(r'^packages="(.*?)"', text, re.M)
    return set(found[1].split())


def test_install_debian_installs_what_build_kenlm_and_install_wordnet_check_for():
    kenlm, wordnet = packages_of("build_kenlm.sh"), packages_of("install_wordnet.sh")
    assert wordnet == {"wordnet-base", "wordnet-sense-index"}
    assert len(kenlm) == 9 and "libboost-program-options-dev" in kenlm
    assert packages_of("install_debian.sh") == kenlm | wordnet


def test_the_kenlm_module_is_pinned_as_a_wheel_distribution():
    """PyPI's `kenlm` is an sdist (a 1.5 min C++ build on 2 cores); `ufal-kenlm` ships the same module built."""
    pins = dict(line.strip().split("==") for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["ufal-kenlm"] == "26.4.1" and "kenlm" not in pins
