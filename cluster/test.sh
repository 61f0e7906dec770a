#!/usr/bin/env bash
# Installs what is missing, builds the `cpu` preset and runs every CPU test through ctest.
# When nvcc is present it also builds the `cuda` preset, so a CUDA compile error fails this script.
# GPU suites carry the CTest label `gpu` and are excluded here (run them with cluster/gpu-test.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

"$here/install-deps.sh" --test

jobs="${MILLIPEDE_BUILD_JOBS:-$(nproc)}"
python="$root/build/pyenv/bin/python3"

cmake --preset cpu -DMILLIPEDE_TEST_PYTHON="$python" >/dev/null
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"

nvcc_bin="$(command -v nvcc || true)"
if [ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc_bin=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc_bin" ]; then
  echo "test.sh: nvcc found ($nvcc_bin): building the cuda preset"
  CUDACXX="$nvcc_bin" cmake --preset cuda -DMILLIPEDE_TEST_PYTHON="$python" >/dev/null
  cmake --build --preset cuda -j "$jobs"
else
  echo "test.sh: no nvcc: the cuda preset was not built"
fi
echo "test.sh: all CPU tests passed"
