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
    lines = out.splitlines()
    uv_install = [i for i, line in enumerate(lines) if line.startswith("uv pip install ")]
    assert len(uv_install) == 1
    build_fairseq = lines.index(f'UV="uv" scripts/build_fairseq.sh {tmp_path}/venv/wheels {tmp_path}/venv/bin/python')
    assert build_fairseq < uv_install[0]  # the wheel first, then the one install that takes it from there
    # FIND_LINKS= above: the only local wheels are fairseq-fixed's, and uv may not fall back to building its sdist
    assert lines[uv_install[0]].count("--find-links") == 1
    assert f"--find-links {tmp_path}/venv/wheels --only-binary fairseq-fixed" in lines[uv_install[0]]
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


def test_build_fairseq_takes_the_wheel_from_dest_or_the_build_cache_before_fetching_anything(tmp_path):
    """scripts/build_fairseq.sh: nothing to do when DEST holds the wheel; a new clone copies it from the machine's build
    cache (no download, no build); a wrong call is one usage line and exit 1."""
    import sys
    import sysconfig

    script = str(REPO / "scripts" / "build_fairseq.sh")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheel = f"fairseq_fixed-0.12.3.1+augdag-{tag}-{tag}-{sysconfig.get_platform().replace('-', '_')}.whl"
    cache = tmp_path / "cache" / f"fairseq-fixed-0.12.3.1+augdag-{tag}-{sysconfig.get_platform().replace('-', '_')}"
    cache.mkdir(parents=True)
    (cache / wheel).write_bytes(b"a wheel")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AUGDAG_BUILD_CACHE": str(tmp_path / "cache")}
    dest = tmp_path / "venv" / "wheels"
    first = subprocess.run([script, str(dest), sys.executable], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"build_fairseq.sh: fairseq-fixed 0.12.3.1+augdag from {cache}\n"
    assert (dest / wheel).read_bytes() == b"a wheel"
    again = subprocess.run([script, str(dest), sys.executable], env=env, capture_output=True, text=True)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    wrong = subprocess.run([script, str(dest)], env=env, capture_output=True, text=True)
    assert wrong.returncode == 1
    assert wrong.stderr == "build_fairseq.sh: usage: scripts/build_fairseq.sh DEST PYTHON (e.g. .venv/wheels .venv/bin/python)\n"
