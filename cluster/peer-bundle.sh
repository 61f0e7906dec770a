#!/usr/bin/env bash
# Assembles the peers of tests/bench/sparse_peers.py for a GPU machine that has PyTorch, Triton and
# the CUDA toolkit but no network. Run it where PyPI is reachable; it writes an ignored folder
# (never commit it: it holds other projects' code):
#
#   OUT/                   (default .gpu/peers under the repository root)
#     minference/          MInference's sparse attention files, as in its repository:
#                          minference/ops/{pit_sparse_flash_attention_v2,block_sparse_flash_attention,
#                          streaming_kernel}.py,
#                          minference/modules/minference_forward.py, csrc/{kernels.cpp,
#                          vertical_slash_index.cu}, LICENSE, and SOURCE (where they came from)
#     site/                ninja (torch.utils.cpp_extension.load needs it; its binary is site/bin/ninja)
#     flashinfer.tar.xz    flashinfer-python and the modules it imports that a bare PyTorch lacks,
#                          with its CUDA sources cut to what the attention JIT modules include
#     MANIFEST             versions, and the size of each part
#
#   cluster/peer-bundle.sh MINFERENCE [--rev REV] [--out DIR] [--no-flashinfer]
#                          [--flashinfer-out DIR]
#
# MINFERENCE is a checkout of MInference's repository, or a bare clone of it (files are then read
# at REV, default HEAD). --flashinfer-out puts flashinfer.tar.xz in its own folder (for moving it
# to the GPU machine separately from the rest). Wheels are fetched for CPython 3.12 on x86-64
# Linux whatever this machine runs; PYTHON names the interpreter whose pip fetches them.
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

FLASHINFER_VERSION=0.7.2.post1
NINJA_VERSION=1.13.2
# What `import flashinfer` and its attention JIT modules need beyond torch and numpy.
FLASHINFER_DEPS=(apache-tvm-ffi==0.1.15.post2 packaging requests urllib3 idna certifi
                 charset-normalizer nvidia-ml-py tqdm einops tabulate)
MINFERENCE_FILES=(minference/ops/pit_sparse_flash_attention_v2.py
                  minference/ops/block_sparse_flash_attention.py
                  minference/ops/streaming_kernel.py
                  minference/modules/minference_forward.py
                  csrc/kernels.cpp csrc/vertical_slash_index.cu LICENSE)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
python="${PYTHON:-python3}"
source_dir="" rev=HEAD out="$root/.gpu/peers" flashinfer=1 flashinfer_out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-flashinfer) flashinfer=0; shift ;;
    --flashinfer-out) flashinfer_out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "peer-bundle.sh: unknown argument $1" >&2; exit 2 ;;
    *) [[ -z "$source_dir" ]] || { echo "peer-bundle.sh: one MInference path only" >&2; exit 2; }
       source_dir="$1"; shift ;;
  esac
done
[[ -n "$source_dir" ]] || { usage >&2; exit 2; }
[[ -d "$source_dir" ]] || { echo "peer-bundle.sh: $source_dir is not a folder" >&2; exit 2; }
"$python" -m pip --version >/dev/null 2>&1 ||
  { echo "peer-bundle.sh: $python has no pip (set PYTHON)" >&2; exit 2; }

# The wheels are for the GPU machine (CPython 3.12, glibc >= 2.28), not for this one. Older pips
# do not widen manylinux_2_28 to the older tags that most wheels carry, so every tag is named.
pip_for_target() {
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 \
    --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any "$@"
}

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/minference"

# MInference: a work tree is copied; a bare repository is read at REV.
if [[ -f "$source_dir/${MINFERENCE_FILES[0]}" ]]; then
  for f in "${MINFERENCE_FILES[@]}"; do
    [[ -f "$source_dir/$f" ]] || { echo "peer-bundle.sh: $source_dir lacks $f" >&2; exit 1; }
    mkdir -p "$stage/minference/$(dirname "$f")"
    cp "$source_dir/$f" "$stage/minference/$f"
  done
  commit="$(git -C "$source_dir" rev-parse HEAD 2>/dev/null || echo unknown)"
elif git -C "$source_dir" rev-parse --verify --quiet "$rev^{commit}" >/dev/null 2>&1; then
  for f in "${MINFERENCE_FILES[@]}"; do
    mkdir -p "$stage/minference/$(dirname "$f")"
    git -C "$source_dir" show "$rev:$f" >"$stage/minference/$f" ||
      { echo "peer-bundle.sh: $f is not in $source_dir at $rev" >&2; exit 1; }
  done
  commit="$(git -C "$source_dir" rev-parse "$rev^{commit}")"
else
  echo "peer-bundle.sh: $source_dir is neither an MInference checkout nor a git repository" >&2
  exit 1
fi
printf 'MInference %s from %s\n' "$commit" "$source_dir" >"$stage/minference/SOURCE"

pip_for_target --target "$stage/site" "ninja==$NINJA_VERSION"
[[ -x "$stage/site/bin/ninja" ]] || { echo "peer-bundle.sh: the ninja wheel has no bin/ninja" >&2; exit 1; }

if [[ $flashinfer -eq 1 ]]; then
  fi_site="$stage/flashinfer-site"
  pip_for_target --target "$fi_site" "flashinfer-python==$FLASHINFER_VERSION" "${FLASHINFER_DEPS[@]}"
  # The wheel carries the CUDA sources of every FlashInfer module (over 400 MB unpacked). Keep the
  # headers that its JIT builds put on the include path and the top level of csrc/ (the attention
  # modules' sources and templates); drop the per-feature subfolders (MoE, GEMMs, other models).
  data="$fi_site/flashinfer/data"
  keep="$stage/keep"
  mkdir -p "$keep"
  for d in include spdlog/include cutlass/include cutlass/tools/util/include cccl/cub \
           cccl/libcudacxx/include cccl/thrust; do
    [[ -d "$data/$d" ]] || { echo "peer-bundle.sh: flashinfer has no data/$d" >&2; exit 1; }
    mkdir -p "$keep/$(dirname "$d")"
    mv "$data/$d" "$keep/$d"
  done
  mkdir -p "$keep/csrc"
  find "$data/csrc" -maxdepth 1 -type f -exec mv -t "$keep/csrc" {} +
  for lic in cutlass/LICENSE.txt cccl/LICENSE spdlog/LICENSE; do
    [[ -f "$data/$lic" ]] && mv "$data/$lic" "$keep/$lic"
  done
  find "$data" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  cp -a "$keep/." "$data/"
  fi_dest="${flashinfer_out:-$stage}"
  mkdir -p "$fi_dest"
  tar -C "$fi_site" -cf - . | xz -T0 -6 >"$fi_dest/flashinfer.tar.xz.part"
  mv "$fi_dest/flashinfer.tar.xz.part" "$fi_dest/flashinfer.tar.xz"
fi

{
  echo "peers for tests/bench/sparse_peers.py"
  echo "MInference: $commit"
  echo "ninja: $NINJA_VERSION"
  if [[ $flashinfer -eq 1 ]]; then
    echo "flashinfer-python: $FLASHINFER_VERSION"
    for d in "$fi_site"/*.dist-info; do basename "$d" .dist-info; done | sed 's/^/  with /'
  fi
  echo "sizes (bytes):"
  du -sb "$stage/minference" "$stage/site" | sed "s|$stage/||; s/^/  /"
  if [[ $flashinfer -eq 1 ]]; then
    echo "  $(stat -c %s "$fi_dest/flashinfer.tar.xz")	flashinfer.tar.xz" \
         "(unpacks to $(du -sb "$fi_site" | cut -f1))"
  fi
} >"$stage/MANIFEST"

# Replace an earlier bundle, but never a folder that is something else.
if [[ -e "$out" ]]; then
  if [[ -f "$out/MANIFEST" ]] && head -1 "$out/MANIFEST" | grep -q '^peers for tests/bench/sparse_peers.py$'; then
    rm -rf "$out"
  elif [[ -n "$(ls -A "$out")" ]]; then
    echo "peer-bundle.sh: $out exists and is not a peer bundle; not replacing it" >&2
    exit 1
  fi
fi
mkdir -p "$out"
mv "$stage/minference" "$stage/site" "$stage/MANIFEST" -t "$out"
if [[ $flashinfer -eq 1 && -z "$flashinfer_out" ]]; then
  mv "$stage/flashinfer.tar.xz" "$out/"
fi
echo "peer-bundle.sh: wrote $out ($(du -sh "$out" | cut -f1))"
if [[ -n "$flashinfer_out" && $flashinfer -eq 1 ]]; then
  echo "peer-bundle.sh: wrote $flashinfer_out/flashinfer.tar.xz ($(du -sh "$flashinfer_out/flashinfer.tar.xz" | cut -f1))"
fi
