#!/usr/bin/env bash
# Packs the built binaries into a relocatable tarball for nodes that lack Debian's packages:
#
#   bundle/
#     bin/        wrappers: set LD_LIBRARY_PATH to ../lib and exec the real binary
#     libexec/    the binaries
#     lib/        the shared libraries they need that are not part of the C runtime or the
#                 GPU driver (found with ldd): Cap'n Proto, prometheus-cpp, civetweb, PCRE2,
#                 libstdc++, CUDA runtime/cuBLAS/NCCL for CUDA builds, ...
#     env.sh      `source bundle/env.sh` puts bin/ on PATH
#     launch-gpu-node.sh, launch-cluster.sh, prometheus/, grafana/
#
#   cluster/bundle.sh [--build DIR] [--out FILE.tar.gz] [--include-mpi] [--cuda-from-node]
#
# MPI is left out by default: ranks must use the MPI library that matches the cluster's mpirun.
# --include-mpi copies the MPI libraries too (for nodes with no MPI library at all that still
# launch with a compatible mpirun). --cuda-from-node leaves out the CUDA runtime, cuBLAS and NCCL
# (nodes with the same CUDA major version installed): a bundle of tens of MB instead of hundreds. The C library, the dynamic loader and the GPU driver
# (libcuda, libnvidia-*) always come from the node.
set -euo pipefail

usage() {
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="" out="" include_mpi=0 cuda_from_node=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --include-mpi) include_mpi=1; shift ;;
    --cuda-from-node) cuda_from_node=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$build" ]]; then
  for candidate in "$here/../build/cuda" "$here/../build/cpu"; do
    if [[ -d "$candidate/bin" ]]; then build="$candidate"; break; fi
  done
fi
[[ -n "$build" && -d "$build/bin" ]] || { echo "bundle.sh: no build folder with bin/ (use --build DIR)" >&2; exit 2; }
out="${out:-$PWD/millipede-bundle.tar.gz}"

binaries=()
for name in millipede-coordinator millipede-worker millipede millipede-run millipede-mkmodel \
            millipede-tokenize millipede-loadgen; do
  [[ -x "$build/bin/$name" ]] && binaries+=("$build/bin/$name")
done
[[ ${#binaries[@]} -gt 0 ]] || { echo "bundle.sh: no millipede binaries in $build/bin" >&2; exit 2; }

# Libraries the node always provides (C runtime, loader, GPU driver), and MPI unless asked.
system_lib() {
  local base="$1"
  case "$base" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|\
    libutil.so*|libcuda.so*|libnvidia-*|libnvcuvid*) return 0 ;;
  esac
  if [[ $cuda_from_node -eq 1 ]]; then
    case "$base" in
      libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*) return 0 ;;
    esac
  fi
  if [[ $include_mpi -eq 0 ]]; then
    case "$base" in
      libmpi*|libopen-pal*|libopen-rte*|libopen-orted*|libpmix*|libhwloc*|libevent*|libucp*|\
      libucs*|libuct*|libucm*|libfabric*|libpsm*|libibverbs*|librdmacm*|libmunge*) return 0 ;;
    esac
  fi
  return 1
}

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/millipede-bundle"
mkdir -p "$root/bin" "$root/libexec" "$root/lib"

missing=0
for binary in "${binaries[@]}"; do
  name="$(basename "$binary")"
  cp "$binary" "$root/libexec/$name"
  # ldd lists every library the binary loads, transitively, with its resolved path.
  while read -r lib arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    if [[ "$path" == "not" ]]; then
      echo "bundle.sh: $name needs $lib, which is not found on this machine" >&2
      missing=1
      continue
    fi
    system_lib "$lib" && continue
    [[ -e "$root/lib/$lib" ]] || cp -L "$path" "$root/lib/$lib"
  done < <(ldd "$binary")
  cat >"$root/bin/$name" <<EOF
#!/usr/bin/env bash
# Runs $name with the bundle's libraries.
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)"
export LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$here/libexec/$name" "\$@"
EOF
  chmod +x "$root/bin/$name"
done
[[ $missing -eq 0 ]] || { echo "bundle.sh: install the missing libraries first" >&2; exit 1; }

cat >"$root/env.sh" <<'EOF'
# source this file: puts the bundle's binaries on PATH (their wrappers set LD_LIBRARY_PATH).
MILLIPEDE_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export MILLIPEDE_HOME
export PATH="$MILLIPEDE_HOME/bin:$PATH"
EOF
cp "$here/launch-gpu-node.sh" "$here/launch-cluster.sh" "$root/"
cp -r "$here/prometheus" "$here/grafana" "$root/"

tar -C "$stage" -czf "$out" millipede-bundle
echo "bundle.sh: wrote $out ($(find "$root/lib" -type f | wc -l) libraries, ${#binaries[@]} binaries)"
