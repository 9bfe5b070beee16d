#!/usr/bin/env bash
# Build fairseq-fixed 0.12.3.1 as a wheel without the three torch extensions augdag never loads, into DEST.
#
#   scripts/build_fairseq.sh DEST PYTHON    # `make install` runs it with DEST = .venv/wheels, PYTHON = .venv/bin/python
#
# Why: PyPI has no cp311 wheel of fairseq-fixed (only cp312), so uv built its sdist: six C++ extensions, three of them
# (`libbase`, BASE layers; `libnat`, Levenshtein/NAT models; `alignment_train_cpu_binding`, examples/operators)
# compiled against torch's headers: 180 s wall, 261 CPU-s of a fresh install on 2 cores, for code augdag's models
# (fairseq `transformer` students and teachers, models/nmt) never import. fairseq imports each of them only inside the
# function that uses it, so `import fairseq`, training and generation do not notice their absence; a NAT model or a
# BASE layer would fail with fairseq's own ImportError. What is left: the two Cython modules training needs
# (`data_utils_fast`, `token_block_utils_fast`) and `libbleu`, none of which links torch, so the build needs no torch
# and the same wheel serves the CPU and the CUDA install: 32 s, 39 CPU-s.
#
# No maintained package does this (fairseq's setup.py has no switch for it), hence this script: it fetches the sdist
# from the package index (the PEP 503 page of $AUGDAG_PYPI_SIMPLE, else $UV_DEFAULT_INDEX, $UV_INDEX_URL,
# $PIP_INDEX_URL, pypi.org), checks its sha256 against the one pinned here, edits setup.py (each edit must match the
# pinned text exactly once), labels the version 0.12.3.1+augdag (`pip show` says which build is installed; the pin
# `fairseq-fixed==0.12.3.1` still matches it) and builds the wheel with the build requirements pinned to
# constraints.txt. Built once per machine: the wheel is kept in $AUGDAG_BUILD_CACHE (default ~/.cache/augdag).
# Idempotent: does nothing when DEST holds the wheel. Environment: UV (default `python3 -m uv`).
set -euo pipefail

die() { printf 'build_fairseq.sh: %s\n' "$*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: scripts/build_fairseq.sh DEST PYTHON (e.g. .venv/wheels .venv/bin/python)"
DEST=$(realpath -m "$1")
PYTHON=$2
VERSION=0.12.3.1
LABEL=augdag
SHA256=c607577a54ab30e2ee0f0b0a754ea5cdbc6ad0a9f99a1726638a2201445bc1cc
SDIST=fairseq_fixed-$VERSION.tar.gz
REPO=$(cd "$(dirname "$0")/.." && pwd)
read -r -a UV <<<"${UV:-python3 -m uv}"

TAG=$("$PYTHON" -c 'import sys, sysconfig; print(f"cp{sys.version_info.major}{sys.version_info.minor}-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))') \
  || die "cannot run $PYTHON"
WHEEL_GLOB="fairseq_fixed-$VERSION+$LABEL-*.whl"
if compgen -G "$DEST/$WHEEL_GLOB" >/dev/null; then
  exit 0
fi
CACHE=${AUGDAG_BUILD_CACHE:-$HOME/.cache/augdag}/fairseq-fixed-$VERSION+$LABEL-$TAG
if compgen -G "$CACHE/$WHEEL_GLOB" >/dev/null; then
  mkdir -p "$DEST" && cp "$CACHE"/$WHEEL_GLOB "$DEST/"
  echo "build_fairseq.sh: fairseq-fixed $VERSION+$LABEL from $CACHE"
  exit 0
fi

WORK=$(mktemp -d -t augdag-fairseq-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
LOG=$WORK/build.log
run() {  # run quietly; on failure show the log's tail
  "$@" >>"$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "failed: $* (full log above, last 30 lines)"; }
}

INDEX=${AUGDAG_PYPI_SIMPLE:-${UV_DEFAULT_INDEX:-${UV_INDEX_URL:-${PIP_INDEX_URL:-https://pypi.org/simple}}}}
INDEX=${INDEX%/}
echo "build_fairseq.sh: building fairseq-fixed $VERSION+$LABEL (no libbase, libnat, alignment_train_cpu_binding) into $DEST"
curl -fsSL --retry 3 "$INDEX/fairseq-fixed/" -o "$WORK/index.html" || die "cannot read $INDEX/fairseq-fixed/ (the package index)"
URL=$(python3 - "$INDEX/fairseq-fixed/" "$SDIST" "$WORK/index.html" <<'EOF'
import html, pathlib, re, sys, urllib.parse
page, name, listing = sys.argv[1:]
for href in re.findall(r'href="([^"]+)"', pathlib.Path(listing).read_text()):
    url = urllib.parse.urljoin(page, html.unescape(href))
    if urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1] == name:
        print(url.split("#", 1)[0])
        break
EOF
)
[ -n "$URL" ] || die "$INDEX/fairseq-fixed/ lists no $SDIST"
curl -fsSL --retry 3 "$URL" -o "$WORK/$SDIST" || die "cannot download $URL"
echo "$SHA256  $WORK/$SDIST" | sha256sum -c --quiet - >/dev/null 2>&1 \
  || die "$URL: sha256 $(sha256sum "$WORK/$SDIST" | cut -d' ' -f1), expected $SHA256 (not the pinned sdist)"
tar xzf "$WORK/$SDIST" -C "$WORK"
SRC=$WORK/fairseq_fixed-$VERSION

python3 - "$SRC" "$VERSION+$LABEL" <<'EOF' || die "the sdist's setup.py is not the text this script edits"
import pathlib, sys
src, version = pathlib.Path(sys.argv[1]), sys.argv[2]

def edit(path, old, new):
    text = (src / path).read_text()
    if text.count(old) != 1:
        sys.exit(f"build_fairseq.sh: {path}: expected exactly one {old[:60]!r}")
    (src / path).write_text(text.replace(old, new))

setup = (src / "setup.py").read_text()
torch_ext = setup.index('extensions.extend(\n    [\n        cpp_extension.CppExtension(\n            "fairseq.libbase"')
build_ext = 'cmdclass = {"build_ext": cpp_extension.BuildExtension}\n'
edit("setup.py", setup[torch_ext : setup.index(build_ext)], "")  # libbase, libnat, alignment_train_cpu_binding, CUDA
edit("setup.py", build_ext, "cmdclass = {}\n")  # setuptools' own build_ext: no torch flags for the three left
edit("setup.py", "from torch.utils import cpp_extension\n", "")
edit("pyproject.toml", '  "torch>=1.10",\n', "")  # the build needs no torch now
(src / "fairseq" / "version.txt").write_text(version + "\n")
EOF

# build_ext --parallel: the three extensions at once (setuptools reads DIST_EXTRA_CONFIG)
printf '[build_ext]\nparallel = %s\n' "$(nproc)" >"$WORK/build_ext.cfg"
DIST_EXTRA_CONFIG=$WORK/build_ext.cfg run "${UV[@]}" build -q --wheel --python "$PYTHON" \
  -b "$REPO/constraints.txt" -o "$WORK/dist" "$SRC"
WHEEL=$(compgen -G "$WORK/dist/$WHEEL_GLOB" | head -n 1) || die "uv build wrote no $WHEEL_GLOB"
python3 - "$WHEEL" <<'EOF' || die "the wheel lacks an extension fairseq's training needs"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for module in ("fairseq/data/data_utils_fast.", "fairseq/data/token_block_utils_fast.", "fairseq/libbleu."):
    if not any(n.startswith(module) and n.endswith(".so") for n in names):
        sys.exit(f"build_fairseq.sh: {sys.argv[1]} has no {module}*.so")
EOF
mkdir -p "$DEST" && cp "$WHEEL" "$DEST/.tmp.$$" && mv -f "$DEST/.tmp.$$" "$DEST/$(basename "$WHEEL")"
if mkdir -p "$CACHE.tmp.$$" && cp "$WHEEL" "$CACHE.tmp.$$/"; then  # the cache, renamed whole
  rm -rf "$CACHE" && mv "$CACHE.tmp.$$" "$CACHE" || rm -rf "$CACHE.tmp.$$"
fi
echo "build_fairseq.sh: done"
