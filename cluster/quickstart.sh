#!/usr/bin/env bash
# The quick start: installs what is missing, builds the `cpu` preset, generates a small demo
# model with random weights and runs one offline generation on the CPU.
#   cluster/quickstart.sh ["prompt text"]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
prompt="${1:-The quick brown fox}"

"$here/install-deps.sh"
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "${MILLIPEDE_BUILD_JOBS:-$(nproc)}" \
  --target millipede-run millipede-mkmodel millipede-tokenize

bin="$root/build/cpu/bin"
model="$root/build/demo-model"
if [ ! -f "$model/config.json" ]; then
  "$bin/millipede-mkmodel" --preset tiny --out "$model" --seed 1
fi

echo "quickstart: prompt: $prompt"
echo "quickstart: generating 32 tokens with the demo model (random weights: the text is noise)"
"$bin/millipede-run" --model "$model" --prompt "$prompt" --max-new-tokens 32 \
  --temperature 0.8 --top-p 0.95 --seed 1 --ignore-eos
"$bin/millipede-run" --model "$model" --prompt "$prompt" --max-new-tokens 8 --json
