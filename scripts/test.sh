#!/usr/bin/env bash
# Install glassroom with its test dependencies (and, as root, the system packages the tests use),
# then run the whole test suite. The README's test command and CI's .ci/run both call this.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
bash scripts/install-system.sh
python3 -m pip install -q -e '.[test,ray,wandb,tensorboard]'
python3 -m pytest -q "$@"
