// The prefix cache's shared KV blocks, as the coordinator and the workers both count them.
//
// A KV store that keeps every row in backend memory allocates its K and V rows in chunks of
// KvShareChunkRows rows. A sequence started from a cached one maps the cached store's chunks that
// lie wholly before the prefix (the same memory, no copy: a chunk is freed once no store maps
// it) and copies only the rows after them, so jobs starting from one cache entry share its
// blocks. The chunk is a power-of-two multiple of the unit, the fewest rows that fill whole pages
// of backend memory for any number of KV heads, and at least a kKvShareChunks-th of the store, so
// a store is made of at most that many chunks.
#pragma once

#include <cstdint>

namespace millipede {

inline constexpr int64_t kKvShareChunks = 16;

// The unit in rows for pages of `page_bytes` and one KV head's row of `head_bytes` (head_dim x
// the dtype's size); 0 when either is not positive (no paged memory: nothing is shared).
int64_t KvShareUnitRows(int64_t page_bytes, int64_t head_bytes);
// Rows of one chunk of a store of `capacity` rows; 0 without a unit.
int64_t KvShareChunkRows(int64_t capacity, int64_t unit_rows);
// Of the first `prefix_rows` rows of a store of `capacity` rows, those in whole chunks: what a
// sequence starting from that prefix maps rather than copies.
int64_t KvSharedRows(int64_t prefix_rows, int64_t capacity, int64_t unit_rows);

}  // namespace millipede
