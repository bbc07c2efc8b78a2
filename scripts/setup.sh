#!/usr/bin/env bash
# Idempotent setup for running (`scripts/setup.sh`) or testing (`scripts/setup.sh test`).
#
#   run:  a virtualenv in .venv with the package, the server, torch (CPU) and the trainer extras.
#   test: the same plus what the test suite talks to for real: OpenSSH's sshd,
#         Debian's chromium and nginx, and a started PostgreSQL when one is installed.
#
# Safe to run again: it skips whatever is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"
python="${PYTHON:-python3}"

log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi
}

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    if ! command -v apt-get >/dev/null; then
        log "no apt-get here: install ${missing[*]} yourself (the tests needing them will skip)"
        return 0
    fi
    as_root apt-get update -qq || true
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null ||
        log "could not install ${missing[*]} (the tests needing them will skip with a reason)"
}

start_postgres() {
    command -v pg_lsclusters >/dev/null || { log "PostgreSQL not installed: its tests will skip"; return 0; }
    pg_lsclusters --no-header 2>/dev/null | while read -r version cluster _port status _rest; do
        if [ "$status" != "online" ]; then
            log "starting PostgreSQL $version/$cluster"
            as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" start ||
                log "could not start PostgreSQL $version/$cluster: its tests will skip"
        fi
    done
}

# Debian's nginx: the tests run it themselves, in the foreground with a directory of
# their own (scripts/replicas.py), as the reverse proxy in front of several servers.
# Where an init system runs, installing the package also starts the system service
# (port 80, Debian's default page); nothing uses it, so stop it again when it was
# this script that installed it.
install_nginx() {
    dpkg -s nginx >/dev/null 2>&1 && return 0
    apt_install nginx
    if command -v systemctl >/dev/null && systemctl is-active --quiet nginx 2>/dev/null; then
        log "stopping the nginx system service the package started (the tests run their own)"
        as_root systemctl disable --now nginx >/dev/null 2>&1 || true
    fi
}

if [ "$mode" = test ]; then
    apt_install openssh-server openssh-client chromium chromium-driver
    install_nginx
    start_postgres
fi

# The browser assets (uPlot, Swagger UI, ReDoc) come from the npm registry,
# pinned by package-lock.json. A source checkout serves them from
# training_platform/web/node_modules; building a wheel copies them into it
# (setup.py, docs/dashboard.md). npm is a build-time tool, never a run-time one;
# its dev packages (ESLint) lint the dashboard's JavaScript in `make lint`.
command -v npm >/dev/null || apt_install nodejs npm
if [ ! -f training_platform/web/node_modules/.package-lock.json ] ||
    [ training_platform/web/package-lock.json -nt training_platform/web/node_modules/.package-lock.json ]; then
    log "installing the dashboard's npm packages"
    # --ignore-scripts: only files are served, so no package's install script runs.
    npm ci --prefix training_platform/web --ignore-scripts --no-audit --no-fund --loglevel=error
fi

if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$python" -m venv .venv
fi
stamp=.venv/.setup-stamp
want="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)-$mode"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing Python packages"
    .venv/bin/pip install -q --upgrade pip
    # torch first and pinned: 2.13.0 is a local CPU wheel here; an unpinned torch
    # (or one pulled in by transformers) would download gigabytes of CUDA packages.
    .venv/bin/pip install -q "torch==2.13.0"
    # The base install is the trainer side's only; `server` brings the platform
    # (`make demo`, `make run`), `dev` the tests (and the server again).
    extras="server,torch,hf,tools"
    [ "$mode" = test ] && extras="server,torch,hf,tools,dev"
    .venv/bin/pip install -q -e ".[$extras]"
    echo "$want" >"$stamp"
fi
log "ready ($mode)"
