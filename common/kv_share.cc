#include "common/kv_share.h"

#include <numeric>

namespace millipede {

int64_t KvShareUnitRows(int64_t page_bytes, int64_t head_bytes) {
  if (page_bytes <= 0 || head_bytes <= 0) return 0;
  return page_bytes / std::gcd(page_bytes, head_bytes);
}

int64_t KvShareChunkRows(int64_t capacity, int64_t unit_rows) {
  if (unit_rows <= 0) return 0;
  const int64_t least = (capacity + kKvShareChunks - 1) / kKvShareChunks;
  int64_t rows = unit_rows;
  while (rows < least) rows *= 2;
  return rows;
}

int64_t KvSharedRows(int64_t prefix_rows, int64_t capacity, int64_t unit_rows) {
  const int64_t chunk = KvShareChunkRows(capacity, unit_rows);
  if (chunk <= 0 || prefix_rows <= 0) return 0;
  return prefix_rows / chunk * chunk;
}

}  // namespace millipede
