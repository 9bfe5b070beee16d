#!/usr/bin/env bash
# WordNet 3.0 for EDA's synonyms (models/wordnet.py): Debian's wordnet-base (the database under
# /usr/share/wordnet) and wordnet-sense-index, installed with apt when missing and apt-get runs as root.
# Never fails the install: without root or apt it prints what to install (the EDA tests skip until then).
set -uo pipefail

[ -f /usr/share/wordnet/index.noun ] && [ -f /usr/share/wordnet/index.sense ] && exit 0
packages="wordnet-base wordnet-sense-index"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_wordnet.sh: WordNet missing; install it by hand: sudo apt-get install -y $packages" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
  apt-get update -qq >/dev/null 2>&1
fi
echo "install_wordnet.sh: apt-get install $packages"
apt-get install -y -qq --no-install-recommends $packages >/dev/null 2>&1 \
  || echo "install_wordnet.sh: apt-get install failed; install by hand: $packages" >&2
exit 0
