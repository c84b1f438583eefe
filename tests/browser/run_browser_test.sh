#!/usr/bin/env bash
# CTest entry of the browser test: run_browser_test.sh SERVER_BINARY OUTPUT_DIR [fake|real]
# Installs playwright-core (pinned in package-lock.json) into tests/browser/node_modules with
# `npm ci` when needed, then runs dashboard.test.mjs. Exit 77 (skipped) without node, npm or
# Debian's chromium, or when npm cannot install the package (no registry).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
server="$1"
out="$2"
chromium="${STRAIT_CHROMIUM:-/usr/bin/chromium}"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (scripts/setup installs it)"; exit 77
  fi
done
if [[ ! -x "$chromium" ]]; then
  echo "SKIP: $chromium is missing (Debian package chromium)"; exit 77
fi

# Reinstall only when the lock file changed since the last install.
stamp="$here/node_modules/.strait-package-lock.json"
if ! cmp -s "$here/package-lock.json" "$stamp"; then
  if ! (cd "$here" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "SKIP: npm ci failed (is the npm registry reachable?)"; exit 77
  fi
  cp "$here/package-lock.json" "$stamp"
fi

mkdir -p "$out"
exec node "$here/dashboard.test.mjs" "$server" "$out" "$chromium" "${3:-fake}"
