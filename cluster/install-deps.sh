#!/usr/bin/env bash
# Installs what Millipede needs from Debian's packages, skipping what is already present.
#   cluster/install-deps.sh          build dependencies (CPU build)
#   cluster/install-deps.sh --test   also the test oracles (Python venv with Hugging Face tokenizers)
# Idempotent: a second run installs nothing. Needs root (or sudo) only when something is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake ninja-build pkg-config git
          libpcre2-dev nlohmann-json3-dev libgtest-dev)
if [ "$want_test" = 1 ]; then
  packages+=(python3 python3-venv python3-pip)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: system packages present"
fi

# Test oracles live in a venv inside the build tree (Debian's Python forbids pip into the system).
# --system-site-packages lets tests also use Debian's own Python packages.
if [ "$want_test" = 1 ]; then
  venv="$root/build/pyenv"
  if [ ! -x "$venv/bin/python3" ]; then
    mkdir -p "$root/build"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  if ! "$venv/bin/python3" -c "import tokenizers" 2>/dev/null; then
    echo "install-deps: installing Python test oracles into build/pyenv"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check "tokenizers>=0.19,<1"
  fi
fi
