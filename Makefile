# The two newcomer commands are `make demo` and `make test`; both install first if needed.
# uv does not read pip's config, so the directory of the local CPU torch wheel is taken from
# `pip config` at install time (never written into a committed file). Pins live in
# constraints.txt, not uv.lock: a uv.lock would record that machine-local directory as torch's
# registry and stop being portable (see docs/install.md).
VENV       ?= .venv
PY         := $(VENV)/bin/python
UV         ?= python3 -m uv
FIND_LINKS ?= $(shell pip config get global.find-links 2>/dev/null)
TORCH      ?= cpu
# fairseq-fixed's sdist imports torch to build (`make constraints` reads its metadata): pin that torch; its torchaudio
# requirement is a CUDA build that breaks `import transformers`, and fairseq needs it only for speech.
PINS       := -b build-constraints.txt --excludes excludes.txt
# Two chains at once (`install` runs them with -j): the Python packages (fairseq-fixed's wheel without the three torch
# extensions augdag never loads, scripts/build_fairseq.sh; then uv: resolve, download, install) and the system ones
# (apt-get: Boost and WordNet in one call, then lmplz's C++ build). Neither needs the other; docs/install.md has each
# step's cost.
INSTALL_JOBS ?= 3

.PHONY: install install-parts install-gpu debian-packages kenlm wordnet demo test test-e2e lint bench constraints clean
install:
	@$(MAKE) --no-print-directory -j $(INSTALL_JOBS) install-parts
install-parts: $(VENV)/.installed-$(TORCH) $(VENV)/bin/lmplz $(VENV)/bin/build_binary wordnet

# the Debian packages of both (scripts/install_debian.sh): one apt-get, at most one `apt-get update`; never fails
debian-packages:
	@scripts/install_debian.sh

# WordNet 3.0 (EDA synonyms, models/wordnet.py): Debian's packages via apt where missing; never fails
wordnet: debian-packages
	@scripts/install_wordnet.sh

$(VENV)/pyvenv.cfg:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install -q uv
	$(UV) venv -q --allow-existing --python 3.11 $(VENV)

# fairseq-fixed as a wheel of our own build (scripts/build_fairseq.sh: PyPI has no cp311 wheel, and its sdist's three
# torch extensions took 180 s of a fresh install): uv installs it from $(VENV)/wheels and is not allowed to build the
# sdist instead (--only-binary), so a wheel that is missing fails the install rather than making it slow.
FAIRSEQ := --find-links $(VENV)/wheels --only-binary fairseq-fixed
$(VENV)/.built-fairseq: scripts/build_fairseq.sh | $(VENV)/pyvenv.cfg
	UV="$(UV)" scripts/build_fairseq.sh $(VENV)/wheels $(PY)
	@touch $@

$(VENV)/.installed-$(TORCH): pyproject.toml constraints.txt build-constraints.txt excludes.txt $(VENV)/.built-fairseq | $(VENV)/pyvenv.cfg
ifeq ($(TORCH),cpu)
	$(UV) pip install -q --python $(PY) -e '.[dev]' -c constraints.txt $(PINS) $(FAIRSEQ) $(if $(FIND_LINKS),--find-links $(FIND_LINKS))
	@$(PY) -c "import torch, sys; sys.exit('augdag: a CUDA torch was installed where the CPU wheel was expected' if torch.version.cuda else 0)"
else
	$(UV) pip install -q --python $(PY) -e '.[dev]' -c constraints.txt $(PINS) $(FAIRSEQ)
endif
	@rm -f $(VENV)/.installed-*; touch $@

# KenLM's lmplz/build_binary (n-gram LM training, models/lm.py), built from the kenlm sdist: the
# registries have none. Only when missing (delete them to rebuild); needs the Boost dev packages.
kenlm: $(VENV)/bin/lmplz $(VENV)/bin/build_binary

$(VENV)/bin/lmplz $(VENV)/bin/build_binary &: | $(VENV)/pyvenv.cfg debian-packages
	scripts/build_kenlm.sh $(VENV)/bin

# Bytecode: this machine sets PYTHONDONTWRITEBYTECODE, so without .pyc files every process recompiles what it
# imports (`import fairseq` 14 s instead of 4 s). uv's --compile-bytecode compiles all 24,764 files of the venv
# (88 CPU-s, a fifth of a fresh install); instead the commands make runs write the .pyc of what they import,
# once (3,465 files for the demo, ~10 CPU-s), and every later process reads them.
unexport PYTHONDONTWRITEBYTECODE

# A GPU machine: the same pins, torch 2.13.0 from PyPI (CUDA build) instead of the local CPU wheel.
install-gpu:
	$(MAKE) install TORCH=cuda FIND_LINKS=

demo: install
	$(VENV)/bin/augdag demo

# ruff (its rules: [tool.ruff] in pyproject.toml; the code as `ruff format` writes it), import-linter's contracts and
# the docs site (mkdocs.yml: `mkdocs build --strict`, so a broken internal link or anchor fails, into a temporary
# directory; its log shown only when it fails: `--quiet` would hide the warnings --strict counts, and pass); .ci/run
# runs it before the tests
lint: install
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(VENV)/bin/lint-imports --no-cache
	@site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $$site >$$site.log 2>&1; \
	  rc=$$?; [ $$rc -eq 0 ] || cat $$site.log; rm -rf $$site $$site.log; exit $$rc

# two workers, whole modules each (their module-scoped servers and trained models are shared within one), the longest
# first and the demo's readers last (tests/conftest.py, hence --no-loadscope-reorder). The suite is CPU-bound (both
# cores busy: a third worker made it slower), so its time is its CPU-seconds over two. Two tiers, by folder:
# `make test` is everything but tests/e2e/ (every pipeline at tiny sizes, the CLI as a subprocess, a night killed
# and resumed beside the tiny demo); `make test-e2e` is tests/e2e/ (Prefect servers and workers, PostgreSQL, a
# browser, a Dask cluster, the full-size `augdag demo` and its numbers). CI (.ci/run) runs both.
# tests/warm.py first: in a fresh environment it writes the bytecode both workers would compile side by side.
PYTEST := $(PY) -m tests.warm && $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder
test: install
	$(PYTEST) -m "not e2e"

# the e2e tier runs Ray clusters too (tests/e2e/test_scale_out.py, test_object_store.py): the `ray` extra, pinned
test-e2e: install $(VENV)/.installed-ray
	$(PYTEST) -m e2e

$(VENV)/.installed-ray: $(VENV)/.installed-$(TORCH)
	$(UV) pip install -q --python $(PY) -e '.[dev,ray]' -c constraints.txt $(PINS) $(FAIRSEQ) $(if $(FIND_LINKS),--find-links $(FIND_LINKS))
	@touch $@

constraints:
	$(UV) pip compile pyproject.toml --extra dev --extra bench --extra ray $(if $(FIND_LINKS),--find-links $(FIND_LINKS)) \
	  $(PINS) --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --no-emit-package torch \
	  --no-header --no-annotate -o constraints.txt

clean:
	rm -rf $(VENV) .augdag
