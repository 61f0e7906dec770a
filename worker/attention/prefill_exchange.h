// How the ranks sharing a sequence exchange data for a prefill step's dense and A-shape heads.
//
// Pass-KV (ring attention): every rank's K/V block of the layer travels round the ring while each
// rank attends its own queries to the block in hand. A rank receives every other rank's block,
// so the bytes grow with the rows the ranks hold: right for a prompt's first step, costly for a
// short chunk deep into a long prompt (every step moves the whole cache once per layer).
//
// Pass-Q: each rank sends its queries to every other rank, every rank attends all the step's
// queries to its own block, and the partials (o, lse) go back to the queries' rank to be merged
// by log-sum-exp. The bytes grow with the step's queries, not with the context held.
//
// Both compute every query-key pair once, on the rank holding the key; the choice is pure
// arithmetic over sizes every rank knows, so every rank makes the same one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace millipede {

enum class PrefillExchange {
  kAuto,    // per step and layer, whichever moves fewer bytes (pass-Q only where it fits)
  kPassKv,  // always the ring of K/V blocks
  kPassQ,   // always queries out and partials back (tests, benchmarks)
};
const char* PrefillExchangeName(PrefillExchange mode);  // "auto", "pass-kv", "pass-q"
StatusOr<PrefillExchange> ParsePrefillExchange(std::string_view name);

// One layer's exchange for one sequence and step: sizes by rank.
struct ExchangeSizes {
  std::span<const int64_t> block_rows;  // [ranks] the rows of each rank's ring block
  std::span<const int64_t> query_rows;  // [ranks] each rank's queries in the step
  int64_t kv_row_bytes = 0;    // K and V of one block row
  int64_t q_row_bytes = 0;     // one query row (F32, every head of the pass)
  int64_t part_row_bytes = 0;  // one query row's partial: o and lse (F32)
};

// The bytes the busiest rank receives in the layer's exchange under each mode.
int64_t PassKvBytes(const ExchangeSizes& s);
int64_t PassQBytes(const ExchangeSizes& s);

// Query rows per rank and round of a pass-Q exchange whose three buffers (queries received,
// partials sent, partials received) hold `buffer_bytes` each: every other rank's rows side by
// side. 0 when not one row fits or there is one rank.
int64_t PassQRoundRows(int64_t buffer_bytes, int ranks, int64_t part_row_bytes);

// The rows of each buffer (`buffer_row_bytes` a row) that hold a pass-Q round of `query_rows`
// rows per rank: what a step forced to pass-Q reserves. 0 with one rank.
int64_t PassQBufferRows(int64_t query_rows, int ranks, int64_t part_row_bytes,
                        int64_t buffer_row_bytes);

// The mode a layer runs: kPassKv or kPassQ. One rank, or buffers that hold no round, always
// pass-KV; kAuto takes pass-Q when its busiest rank receives fewer bytes.
PrefillExchange ChooseExchange(PrefillExchange requested, const ExchangeSizes& s,
                               int64_t round_rows);

}  // namespace millipede
