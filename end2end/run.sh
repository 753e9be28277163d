#!/usr/bin/env bash
# Browser tests of the console: installs Chromium (Debian) and playwright-core (npm) when
# missing, builds sless, then runs every end2end test against a fresh `sless up`.
set -euo pipefail
cd "$(dirname "$0")"

export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "end2end: installing Debian's chromium" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium
fi

# npm ci only when the installed playwright-core is not the locked one.
locked=$(node -p "require('./package-lock.json').packages['node_modules/playwright-core'].version")
installed=$(node -p "try { require('./node_modules/playwright-core/package.json').version } catch { '' }")
if [ "$locked" != "$installed" ]; then
  echo "end2end: npm ci (playwright-core $locked)" >&2
  npm ci --no-audit --no-fund
fi

# The path cargo reports, wherever CARGO_TARGET_DIR or .cargo/config put it. The binary
# `cargo test` builds (the same features as after the Rust tests: nothing to recompile).
if [ -z "${SLESS_BIN:-}" ]; then
  SLESS_BIN=$(cargo test --locked --workspace --no-run --message-format=json-render-diagnostics |
    node -e 'let bin = ""; require("readline").createInterface({ input: process.stdin })
      .on("line", (l) => { const m = JSON.parse(l);
        if (m.reason === "compiler-artifact" && m.executable && m.target.kind.includes("bin")
            && m.target.name === "sless" && !m.profile.test) bin = m.executable; })
      .on("close", () => console.log(bin));')
fi
[ -x "$SLESS_BIN" ] || { echo "end2end: no sless binary at '$SLESS_BIN'" >&2; exit 1; }
export SLESS_BIN
npm test
