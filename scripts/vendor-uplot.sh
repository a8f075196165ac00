#!/usr/bin/env bash
# Refresh the dashboard's vendored uPlot files from the npm registry (package.json pins the version,
# package-lock.json its hash). The copies in glassroom/web/frontend/vendor/ are committed, so the
# dashboard and the static site work offline and need no npm at install or run time; run this only
# to upgrade uPlot (edit the version in package.json first).
set -euo pipefail
cd "$(dirname "$0")/../glassroom/web/frontend"
npm ci --no-audit --no-fund
mkdir -p vendor
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css vendor/
cp node_modules/uplot/LICENSE vendor/uPlot.LICENSE
echo "vendored uPlot $(node -p "require('./node_modules/uplot/package.json').version") into $(pwd)/vendor"
