#!/usr/bin/env bash
# Install glassroom with its test dependencies (and, as root, the system packages the tests use),
# then run the test suite on every core (pytest-xdist, one torch thread per worker). The README's
# test command and CI's .ci/run both call this.
#   bash scripts/test.sh            everything
#   bash scripts/test.sh --fast     the in-process tier: no slow, browser, dist or gpu tests
# Other arguments go to pytest (e.g. tests/web -k feeds, -n 1 for one worker).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
args=()
marks=()
for a in "$@"; do
  if [ "$a" = "--fast" ]; then marks=(-m "not slow and not browser and not dist and not gpu"); else args+=("$a"); fi
done
bash scripts/install-system.sh
python3 -m pip install -q -e '.[test,ray,wandb,tensorboard]'
python3 -m pytest -q -n auto --dist loadfile "${marks[@]}" "${args[@]}"
