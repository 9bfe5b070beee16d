#!/usr/bin/env bash
# Build wheels of the dependencies the registries ship only as source (kenlm's Python module: a ~1 min C++
# build; seqeval; antlr4-python3-runtime) into DIR, once per machine, at the versions pinned in constraints.txt.
#
#   scripts/build_wheelhouse.sh DIR        # `make install` runs it with DIR = ~/.cache/augdag/wheels
#
# uv rebuilds a source distribution from a local (file://) index for every new virtual environment; with these
# wheels on --find-links a new clone's install takes them instead. Idempotent: a pinned wheel already in DIR is
# kept (delete DIR to rebuild). Environment: PYTHON (default python3, the venv's Python version, with pip).
set -euo pipefail

die() { printf 'build_wheelhouse.sh: %s\n' "$*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: scripts/build_wheelhouse.sh DIR"
DIR=$1
PYTHON=${PYTHON:-python3}
CONSTRAINTS=$(dirname "$0")/../constraints.txt
mkdir -p "$DIR" || die "cannot create $DIR (set WHEELHOUSE=DIR for make install)"

for name in kenlm seqeval antlr4-python3-runtime; do
  pin=$(grep -i "^$name==" "$CONSTRAINTS" | head -1) || die "$name is not pinned in constraints.txt"
  wheel=$(echo "${pin%%==*}" | tr '-' '_')-${pin##*==}-
  compgen -G "$DIR/$wheel*.whl" >/dev/null && continue
  echo "build_wheelhouse.sh: building $pin into $DIR"
  "$PYTHON" -m pip wheel -q --no-deps -w "$DIR" "$pin" >"$DIR/.build.log" 2>&1 \
    || { tail -n 20 "$DIR/.build.log" >&2; echo "build_wheelhouse.sh: $pin not built (above); uv builds it" >&2; }
done
