#!/usr/bin/env bash
# Regenerate the reference outputs in tests/fixtures/fast_align/ from its corpus.txt with a built clab/fast_align.
#
#   FAST_ALIGN_BIN=/path/to/fast_align scripts/fast_align_fixture.sh [DIR]   # DIR: tests/fixtures/fast_align
#
# Runs, in a scratch directory holding a copy of DIR/corpus.txt (so the tool's stderr names no machine path),
#   fast_align -i corpus.txt -d -o -v -s -p forward.ttable      > forward.align 2> forward.stderr
#   fast_align -i corpus.txt -d -o -v -s -p reverse.ttable -r   > reverse.align 2> reverse.stderr
#   atools -i <forward links> -j <reverse links> -c grow-diag-final-and > gdfa.align
# with OMP_NUM_THREADS=1 (the tool's OpenMP count updates race otherwise); the links given to atools are
# the .align lines without their " ||| score". Only the tool's output is written here, never its code.
# Environment: FAST_ALIGN_BIN (required), ATOOLS_BIN (default: atools beside FAST_ALIGN_BIN).
set -euo pipefail

die() { printf 'fast_align_fixture.sh: %s\n' "$*" >&2; exit 1; }

[ $# -le 1 ] || die "usage: FAST_ALIGN_BIN=... scripts/fast_align_fixture.sh [DIR]"
DIR=$(realpath -m "${1:-$(dirname "$0")/../tests/fixtures/fast_align}")
[ -n "${FAST_ALIGN_BIN:-}" ] || die "FAST_ALIGN_BIN is not set (the fast_align binary of a clab/fast_align build)"
FAST_ALIGN=$(realpath "$FAST_ALIGN_BIN")
ATOOLS=$(realpath -m "${ATOOLS_BIN:-$(dirname "$FAST_ALIGN")/atools}")
[ -x "$FAST_ALIGN" ] || die "$FAST_ALIGN: not an executable (FAST_ALIGN_BIN)"
[ -x "$ATOOLS" ] || die "$ATOOLS: not an executable (set ATOOLS_BIN)"
[ -f "$DIR/corpus.txt" ] || die "$DIR/corpus.txt: no such file (the 'src ||| tgt' corpus; see DIR/README.md)"

WORK=$(mktemp -d -t augdag-fast-align-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp "$DIR/corpus.txt" "$WORK/corpus.txt"
cd "$WORK"
export OMP_NUM_THREADS=1
"$FAST_ALIGN" -i corpus.txt -d -o -v -s -p forward.ttable > forward.align 2> forward.stderr
"$FAST_ALIGN" -i corpus.txt -d -o -v -s -p reverse.ttable -r > reverse.align 2> reverse.stderr
sed 's/ *|||.*//' forward.align > forward.links
sed 's/ *|||.*//' reverse.align > reverse.links
"$ATOOLS" -i forward.links -j reverse.links -c grow-diag-final-and > gdfa.align
for f in forward.align forward.stderr forward.ttable reverse.align reverse.stderr reverse.ttable gdfa.align; do
  mv -f "$f" "$DIR/$f"
done
echo "fast_align_fixture.sh: wrote $(cd "$DIR" && du -ch -- *.align *.stderr *.ttable | tail -n 1 | cut -f1) to $DIR"
