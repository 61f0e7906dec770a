// The CPU backend's attention: AttentionArgs (kernels/attention/attention.h), blocked and
// threaded, with every mask feature of the reference (causal or none, q/k offsets, GQA, A-shape
// sink + window heads, hidden key rows) and the optional LSE.
#pragma once

#include "common/status.h"
#include "kernels/attention/attention.h"

namespace millipede {

// Computes what AttentionRef computes, in fp32, flash-attention style: per KV head and block of
// query positions (all q heads of the group packed together), key tiles of kAttentionCpuKeyTile
// keys are scored with sgemm (Q K^T), masked, turned into probabilities with an online softmax
// whose running (max, sum) per query row combines tiles through AttentionState::Merge, and added
// into the output with sgemm (P V). Tiles no query of a block can see (after its causal limit,
// between an A-shape head's sinks and window, wholly hidden rows) are skipped, not computed.
// Work items (KV head x query block) run in parallel; when there are fewer than threads (decode),
// the keys are split too and the parts merged with MergeStateCpu.
// Same argument checks and errors as AttentionRef; every element of o (and lse) is written.
struct AttentionCpuOptions {
  // Parts the keys are split into per item; 0 decides from the thread count (tests force it).
  int64_t key_splits = 0;
};
Status AttentionCpu(const AttentionArgs& args, const AttentionCpuOptions& options = {});

// Keys per tile.
inline constexpr int64_t kAttentionCpuKeyTile = 256;

}  // namespace millipede
