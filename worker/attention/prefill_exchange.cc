#include "worker/attention/prefill_exchange.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace millipede {

const char* PrefillExchangeName(PrefillExchange mode) {
  switch (mode) {
    case PrefillExchange::kAuto: return "auto";
    case PrefillExchange::kPassKv: return "pass-kv";
    case PrefillExchange::kPassQ: return "pass-q";
  }
  return "?";
}

StatusOr<PrefillExchange> ParsePrefillExchange(std::string_view name) {
  for (PrefillExchange m :
       {PrefillExchange::kAuto, PrefillExchange::kPassKv, PrefillExchange::kPassQ})
    if (name == PrefillExchangeName(m)) return m;
  return InvalidArgumentError("--prefill-exchange takes auto, pass-kv or pass-q, got \"" +
                              std::string(name) + "\"");
}

int64_t PassKvBytes(const ExchangeSizes& s) {
  // A rank receives every other rank's block.
  const int64_t all = std::accumulate(s.block_rows.begin(), s.block_rows.end(), int64_t{0});
  int64_t most = 0;
  for (int64_t rows : s.block_rows) most = std::max(most, (all - rows) * s.kv_row_bytes);
  return most;
}

int64_t PassQBytes(const ExchangeSizes& s) {
  // A rank receives every other rank's queries, and from each other rank its own queries'
  // partials.
  const int64_t all = std::accumulate(s.query_rows.begin(), s.query_rows.end(), int64_t{0});
  const int64_t others = static_cast<int64_t>(s.query_rows.size()) - 1;
  int64_t most = 0;
  for (int64_t rows : s.query_rows)
    most = std::max(most, (all - rows) * s.q_row_bytes + others * rows * s.part_row_bytes);
  return most;
}

int64_t PassQRoundRows(int64_t buffer_bytes, int ranks, int64_t part_row_bytes) {
  if (ranks <= 1 || part_row_bytes <= 0) return 0;
  return std::max<int64_t>(buffer_bytes, 0) / ((ranks - 1) * part_row_bytes);
}

int64_t PassQBufferRows(int64_t query_rows, int ranks, int64_t part_row_bytes,
                        int64_t buffer_row_bytes) {
  if (ranks <= 1 || buffer_row_bytes <= 0) return 0;
  const int64_t bytes = (ranks - 1) * std::max<int64_t>(query_rows, 1) * part_row_bytes;
  return (bytes + buffer_row_bytes - 1) / buffer_row_bytes;
}

PrefillExchange ChooseExchange(PrefillExchange requested, const ExchangeSizes& s,
                               int64_t round_rows) {
  if (s.block_rows.size() <= 1 || round_rows <= 0 || requested == PrefillExchange::kPassKv)
    return PrefillExchange::kPassKv;
  if (requested == PrefillExchange::kPassQ) return PrefillExchange::kPassQ;
  return PassQBytes(s) < PassKvBytes(s) ? PrefillExchange::kPassQ : PrefillExchange::kPassKv;
}

}  // namespace millipede
