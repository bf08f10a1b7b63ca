#!/usr/bin/env bash
# Installs what the end-to-end test (`npm run test:e2e`) needs, on a fresh Debian machine with Node 20 /
# npm 11 and the project's venv at .venv. Idempotent: a second run only checks. Run as root (apt-get).
#   - Debian: chromium (driven by playwright-core), ripgrep (stands in for @vscode/ripgrep's download),
#     libkrb5-dev + g++/make (code-server's kerberos module builds from source)
#   - npm: the extension's packages (root package-lock.json), and code-server 4.100.3 + playwright-core
#     in tests/e2e/node_modules (tests/e2e/package-lock.json)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$SECONDS
say() { echo "[e2e-setup] $*"; }

# ---- Debian packages ---------------------------------------------------------------------------
missing=()
for pkg in chromium ripgrep libkrb5-dev g++ make python3; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v chromium >/dev/null && command -v rg >/dev/null

# ---- npm: npm 11 blocks dependency install scripts by default and this machine's npmrc says
# yes=false (node-pty's postinstall runs `npx node-gyp`); code-server's postinstall refuses to run as
# root without unsafe-perm and runs a nested `npm install` in lib/vscode that builds native modules.
# These variables are set for the code-server install only. ------------------------------------------
stamp_ok() { # $1 = folder holding package-lock.json and node_modules
  [ -f "$1/node_modules/.aoti-stamp" ] && [ "$(cat "$1/node_modules/.aoti-stamp")" = "$(sha256sum "$1/package-lock.json" | cut -d' ' -f1)" ]
}
write_stamp() { sha256sum "$1/package-lock.json" | cut -d' ' -f1 >"$1/node_modules/.aoti-stamp"; }

if ! stamp_ok "$ROOT"; then
  say "npm ci (extension)"
  npm ci --no-audit --no-fund --loglevel=error
  write_stamp "$ROOT"
fi

E2E=$ROOT/tests/e2e
if ! stamp_ok "$E2E" || ! [ -x "$E2E/node_modules/.bin/code-server" ]; then
  # @vscode/ripgrep's postinstall downloads rg from GitHub (unreachable here): give it a cached
  # "download" holding Debian's rg, which it unpacks instead ("Using cached download").
  case "$(uname -m)" in
    x86_64) target=x86_64-unknown-linux-musl ;;
    aarch64) target=aarch64-unknown-linux-musl ;;
    *) echo "unsupported arch $(uname -m)" >&2; exit 1 ;;
  esac
  cache="${TMPDIR:-/tmp}/vscode-ripgrep-cache-1.15.11"
  tarball="$cache/ripgrep-v13.0.0-10-$target.tar.gz"
  if [ ! -s "$tarball" ]; then
    mkdir -p "$cache"
    tmp=$(mktemp -d)
    cp "$(command -v rg)" "$tmp/rg"
    tar czf "$tarball" -C "$tmp" rg
    rm -rf "$tmp"
  fi
  say "npm ci (code-server 4.100.3, playwright-core) in tests/e2e: about a minute"
  (cd "$E2E" && npm_config_yes=true npm_config_unsafe_perm=true npm_config_dangerously_allow_all_scripts=true \
    npm ci --no-audit --no-fund --loglevel=error)
  write_stamp "$E2E"
fi
xdg=$(mktemp -d) # code-server writes a default config.yaml into $XDG_CONFIG_HOME when it runs
XDG_CONFIG_HOME=$xdg "$E2E/node_modules/.bin/code-server" --version
rm -rf "$xdg"
[ -f "$E2E/node_modules/code-server/lib/vscode/node_modules/@vscode/ripgrep/bin/rg" ]
[ -x .venv/bin/python ] || { echo "[e2e-setup] .venv/bin/python missing: create the project's venv first" >&2; exit 1; }
say "ready in $((SECONDS - start)) s"
