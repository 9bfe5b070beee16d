#!/usr/bin/env bash
# Build KenLM's `lmplz` and `build_binary` (kenlm 0.3.0, the version of the pip module) into DEST.
#
#   scripts/build_kenlm.sh DEST        # `make install` runs it with DEST = .venv/bin
#
# The registries ship no lmplz (the pip module only queries), so it is built from the PyPI sdist:
# Boost dev packages via apt when missing, cmake Release with KENLM_MAX_ORDER=6 as a unity build, ~50 CPU-s.
# Idempotent: does nothing when both binaries are already in DEST (delete them to rebuild).
# Built once per machine: the binaries are kept in $AUGDAG_BUILD_CACHE (default ~/.cache/augdag) under
# kenlm-VERSION-orderN-ARCH, and a new clone's `make install` copies them from there (delete it to rebuild).
# Environment: PYTHON (default python3, must have pip), KENLM_VERSION (0.3.0), KENLM_MAX_ORDER (6).
set -euo pipefail

die() { printf 'build_kenlm.sh: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: scripts/build_kenlm.sh DEST (a directory, e.g. .venv/bin)"
DEST=$(realpath -m "$1")
VERSION=${KENLM_VERSION:-0.3.0}
MAX_ORDER=${KENLM_MAX_ORDER:-6}
PYTHON=${PYTHON:-python3}

if [ -x "$DEST/lmplz" ] && [ -x "$DEST/build_binary" ]; then
  exit 0
fi

install_from() {  # copy then rename: a killed copy never leaves a half binary in DEST
  mkdir -p "$DEST"
  for b in lmplz build_binary; do
    cp "$1/$b" "$DEST/.$b.tmp" && mv -f "$DEST/.$b.tmp" "$DEST/$b"
  done
}
CACHE=${AUGDAG_BUILD_CACHE:-$HOME/.cache/augdag}/kenlm-$VERSION-order$MAX_ORDER-$(uname -m)
if [ -x "$CACHE/lmplz" ] && [ -x "$CACHE/build_binary" ]; then
  install_from "$CACHE"
  echo "build_kenlm.sh: lmplz, build_binary (kenlm $VERSION, max order $MAX_ORDER) from $CACHE"
  exit 0
fi

# cmake finds Boost's program_options, system, thread and unit_test_framework; zlib/bz2/lzma are optional
# compression for lmplz's input but are linked when present.
PACKAGES=(build-essential cmake zlib1g-dev libbz2-dev liblzma-dev
          libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev)
if command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
      die "missing Debian packages: ${missing[*]} (apt-get needs root here). Install them by hand:
  sudo apt-get install -y --no-install-recommends ${missing[*]}
then run: make kenlm"
    fi
    export DEBIAN_FRONTEND=noninteractive
    # the package lists are there on an image that has run `apt-get update` once (possibly .lz4-compressed)
    if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
      apt-get update -qq || die "apt-get update failed; install by hand: ${missing[*]}"
    fi
    echo "build_kenlm.sh: apt-get install ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || die "apt-get install failed; install by hand: ${missing[*]}"
  fi
fi

WORK=$(mktemp -d -t augdag-kenlm-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
LOG=$WORK/build.log
run() {  # run quietly; on failure show the log's tail
  "$@" >>"$LOG" 2>&1 || { tail -n 30 "$LOG" >&2; die "failed: $* (full log above, last 30 lines)"; }
}

echo "build_kenlm.sh: building lmplz, build_binary (kenlm $VERSION, max order $MAX_ORDER) into $DEST"
# --no-binary kenlm, not :all: -- the latter also builds pip's build requirements from source, CMake included
# (many minutes); here they come as wheels and only the kenlm sdist is fetched.
run "$PYTHON" -m pip download -q --no-deps --no-binary kenlm "kenlm==$VERSION" -d "$WORK"
tar xzf "$WORK/kenlm-$VERSION.tar.gz" -C "$WORK"
# A unity build (CMake >= 3.16: several .cc files compiled as one, Boost's headers parsed once per batch): 48 CPU-s
# instead of 90, and the same LMs (lmplz and build_binary of both builds wrote identical ARPA and binary files on
# 20,000 lines). One file clashes with another in a batch (an anonymous-namespace kConverter): compiled alone.
grep -q 'float_to_string.cc' "$WORK/kenlm-$VERSION/util/CMakeLists.txt" \
  || die "kenlm $VERSION's util/CMakeLists.txt does not list float_to_string.cc; the unity build needs checking"
echo 'set_source_files_properties(float_to_string.cc PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)' \
  >>"$WORK/kenlm-$VERSION/util/CMakeLists.txt"
mkdir -p "$WORK/kenlm-$VERSION/build"
cd "$WORK/kenlm-$VERSION/build"
run cmake .. -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER="$MAX_ORDER" -DCMAKE_UNITY_BUILD=ON
run make -j"$(nproc)" lmplz build_binary
install_from bin
if mkdir -p "$CACHE.tmp.$$" && cp bin/lmplz bin/build_binary "$CACHE.tmp.$$/"; then  # the cache, renamed whole
  rm -rf "$CACHE" && mv "$CACHE.tmp.$$" "$CACHE" || rm -rf "$CACHE.tmp.$$"
fi
echo "build_kenlm.sh: done"
