#!/usr/bin/env bash
# The Debian packages `make install` needs, in one apt-get call: what lmplz's build links (scripts/build_kenlm.sh:
# Boost's program_options, system, thread, test; zlib, bz2, lzma; cmake and a C++ compiler) and WordNet 3.0 for
# EDA's synonyms (scripts/install_wordnet.sh). One call instead of one per script: `apt-get update` runs at most
# once (on a machine with no package lists: ~17 s) and the two scripts, which `make install` runs beside the Python
# packages' install, never wait on each other's dpkg lock.
#
#   scripts/install_debian.sh        # `make install` runs it; does nothing when every package is installed
#
# Never fails: without root or apt-get it prints the line to run; build_kenlm.sh then stops with the same line
# (lmplz is needed), install_wordnet.sh goes on (the EDA tests skip until WordNet is there).
set -uo pipefail

PACKAGES=(build-essential cmake zlib1g-dev libbz2-dev liblzma-dev
          libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev
          wordnet-base wordnet-sense-index)
command -v dpkg-query >/dev/null || exit 0  # not Debian: build_kenlm.sh and install_wordnet.sh say what is missing
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_debian.sh: missing Debian packages; install them by hand:" >&2
  echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
# the package lists are there on an image that has run `apt-get update` once (possibly .lz4-compressed)
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
  apt-get update -qq >/dev/null 2>&1 || echo "install_debian.sh: apt-get update failed" >&2
fi
echo "install_debian.sh: apt-get install ${missing[*]}"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
  || echo "install_debian.sh: apt-get install failed; install by hand: ${missing[*]}" >&2
echo "install_debian.sh: done in $((SECONDS - start)) s"
exit 0
