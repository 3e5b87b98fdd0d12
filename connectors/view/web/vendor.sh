#!/usr/bin/env bash
# Refreshes vendor/ from the versions package-lock.json pins:
#   bash connectors/view/web/vendor.sh
# The files in vendor/ are committed, so that building braid needs no npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
npm ci --no-audit --no-fund --ignore-scripts
mkdir -p vendor
cp node_modules/echarts/dist/echarts.min.js vendor/echarts.min.js
cp node_modules/cytoscape/dist/cytoscape.min.js vendor/cytoscape.min.js
cp node_modules/echarts/LICENSE vendor/LICENSE.echarts
cp node_modules/cytoscape/LICENSE vendor/LICENSE.cytoscape
rm -rf node_modules
