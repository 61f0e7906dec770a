// Recorded decode steps (decode graphs, see decode_graphs.h): a decode-only step on one rank is
// run by replaying a recording of its ops. Before each step the host uploads what changes from
// token to token — ids, positions, each token's cache row and each sequence's rows after the
// step — and the recorded ops read them: RoPE stores each token at its uploaded row of the whole
// store (RopeKvArgs::cache_rows) and attention spans the sequence's bucket of rows, limited to its
// uploaded length (BatchDecodeAttentionArgs::lengths).
#pragma once

#include <vector>

#include "common/status.h"
#include "worker/engine/decode_graphs.h"
#include "worker/engine/engine_context.h"
#include "worker/engine/layer_loop.h"
#include "worker/engine/rank_entry.h"

namespace millipede {

class DecodeGraphRunner {
 public:
  DecodeGraphRunner(EngineContext& ctx, LayerLoop& loop) : ctx_(ctx), loop_(loop) {}

  // Whether this step may be run by a recording (EngineOptions::decode_graphs): decode tokens
  // only, one rank, no profiling or observer, every layer's strategy recordable, room in every
  // store's fixed rows.
  bool Recordable(const std::vector<RankEntry>& entries) const;
  // The step run by its recording: recorded first, replayed, or run as usual as DecodeGraphCache
  // says (the logits computed; the caller finishes the step).
  Status Run(std::vector<RankEntry>& entries);
  // Drops every recording (sequences started or ended: the stores' buffers move).
  void Clear() { graphs_.Clear(); }

 private:
  // The recordable part of a step: embedding, layers, logits (ids and metadata uploaded).
  Status RunBody(std::vector<RankEntry>& entries);

  EngineContext& ctx_;
  LayerLoop& loop_;
  DecodeGraphCache graphs_;
};

}  // namespace millipede
