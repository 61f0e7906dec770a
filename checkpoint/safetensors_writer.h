// Writing safetensors files and sharded checkpoints that Hugging Face tooling loads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace millipede {

// A tensor to write: its name and a view of contiguous host memory.
using NamedTensor = std::pair<std::string, ConstTensorView>;

// Writes one safetensors file: the header (with "__metadata__" when `metadata` is non-empty,
// padded with spaces so the data section starts 8-byte aligned, as the reference writer does),
// then each tensor's bytes in the given order, back to back. The data is streamed from the views,
// never gathered in memory, so files of many GB are fine. The file appears at `path` only once
// complete (written to a temporary sibling, flushed, renamed). InvalidArgument for duplicate or
// reserved ("__metadata__") names, names or metadata that are not UTF-8, negative dimensions,
// null data for a non-empty tensor, or a header over kMaxSafetensorsHeaderBytes.
Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// "model-00002-of-00005.safetensors" for index 1 (0-based) of 5, the transformers naming.
std::string ShardFileName(int index, int count);

// Writes a sharded checkpoint into `dir` (created if missing): tensors in the given order are
// packed greedily into shards of at most `max_shard_bytes` of tensor data (a tensor larger than
// that gets a shard of its own), named by ShardFileName, each carrying `metadata`; then
// model.safetensors.index.json with {"metadata": {"total_size": bytes}, "weight_map": {...}}.
// An index is written even for a single shard. The index is written last, so a directory
// never names a shard that is not yet complete.
Status WriteShardedSafetensors(const std::string& dir, const std::vector<NamedTensor>& tensors,
                               uint64_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace millipede
