"""The README and the docs site stay true (issue 50, "README and docs").

The site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, as `make lint` builds it, and a broken internal link
or anchor under this configuration fails the build; every page under docs/ is in the nav; the README's links resolve;
its ten-line profile validates; its two commands are the Makefile's targets. The site tests skip where mkdocs and
mkdocs-material are not installed (the `dev` extra has them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import flows  # noqa: F401  (registers the pipelines a profile names)
from conf.errors import InputError
from conf.loader import check_inputs, load_profile
from tests.conftest import REPO

README = REPO / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # a Markdown link's target, without its anchor


def mkdocs_or_skip() -> None:
    for module in ("mkdocs", "material"):
        pytest.importorskip(module, reason="mkdocs and mkdocs-material come with the dev extra: uv pip install -e '.[dev]'")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` as `make lint` runs it (never with --quiet: mkdocs 1.6 then drops the warnings that
    --strict counts, and a broken link passes)."""
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs 1.6 prints its 2.0 notice unless told
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def nav_pages(config: dict) -> list[str]:
    return [page for entry in config["nav"] for page in entry.values()]


def test_the_docs_site_builds_strict_with_every_page_in_the_nav(tmp_path):
    mkdocs_or_skip()
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = nav_pages(config)
    assert sorted(pages) == sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert pages[:2] == ["index.md", "install.md"] and "architecture.md" in pages and "sql.md" in pages
    done = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if not line.startswith("INFO")] == []
    built = sorted(p.parent.name for p in (tmp_path / "site").glob("*/index.html"))
    assert built == sorted(p.removesuffix(".md") for p in pages if p != "index.md")


def test_a_broken_internal_link_and_a_missing_anchor_fail_the_strict_build(tmp_path):
    """mkdocs.yml's own settings (strict, validation) over two pages: a link to a missing page and a link to a heading
    that does not exist are each named, and the build fails (a good site builds: the test above)."""
    mkdocs_or_skip()
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    config |= {"docs_dir": str(docs), "nav": [{"Home": "index.md"}, {"SQL": "sql.md"}]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (docs / "sql.md").write_text("# SQL\n\n## Views\n")
    (docs / "index.md").write_text("# Home\n\n[a page](pipelines.md), [a heading](sql.md#no-such-heading), [ok](sql.md#views)\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert done.returncode == 1
    assert len(warnings) == 2
    assert "contains a link 'pipelines.md', but the target is not found" in warnings[0]
    assert "contains a link 'sql.md#no-such-heading', but the doc 'sql.md' does not contain an anchor" in warnings[1]


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository():
    targets = LINK.findall(README.read_text())
    assert "docs/benchmarks.md" in targets and "docs/index.md" in targets
    assert [t for t in targets if not t.startswith("http") and not (REPO / t).is_file()] == []


def readme_profile() -> str:
    blocks = re.findall(r"^```yaml\n(.*?)^```", README.read_text(), re.S | re.M)
    assert len(blocks) == 1, "the README shows one profile"
    return blocks[0]


def test_the_readme_profile_is_ten_lines_that_validate_and_name_their_inputs(tmp_path):
    text = readme_profile()
    assert len(text.splitlines()) <= 11
    profile = tmp_path / "my.yaml"
    profile.write_text(text)
    conf = load_profile(profile)
    assert conf.pipelines == ["ingest", "self_training"]
    assert {k: (d.kind, d.language or d.src_lang) for k, d in conf.datasets.items()} == {
        "train": ("bitext", "en"),
        "mono": ("mono", "en"),
    }
    assert conf.datasets["train"].src == tmp_path / "data" / "train.en"  # relative to the profile's file
    assert (conf.self_training.bitext, conf.self_training.mono, conf.self_training.sampling.budget) == (
        "train",
        ["mono"],
        100000,
    )
    with pytest.raises(InputError) as missing:
        check_inputs(conf)
    assert str(missing.value) == f"datasets.train: {tmp_path}/data/train.en: no such file (and 2 more missing)"
    (tmp_path / "data").mkdir()
    for name in ("train.en", "train.de", "mono.en"):
        (tmp_path / "data" / name).write_text("a line\n")
    check_inputs(conf)


def test_the_readme_two_commands_are_the_makefile_targets():
    """`make demo` runs `augdag demo` after the install; `make test` runs pytest on all but the e2e tier."""
    makefile = (REPO / "Makefile").read_text()
    assert "make demo   # install," in README.read_text() and "make test   # install," in README.read_text()
    assert re.search(r"^demo: install\n\t\$\(VENV\)/bin/augdag demo$", makefile, re.M)
    assert re.search(r'^test: install\n\t\$\(PYTEST\) -m "not e2e"$', makefile, re.M)


def test_make_lint_builds_the_site_strict_into_a_temporary_directory():
    lint = re.search(r"^lint:.*?(?=^\S)", (REPO / "Makefile").read_text(), re.S | re.M)[0]
    assert "$(VENV)/bin/mkdocs build --strict --site-dir $$site " in lint and "rm -rf $$site" in lint
    assert "--quiet" not in lint  # it hides the warnings --strict counts
