// Internal to AttentionCpu: the work of one (KV head, query block, key range) item.
#pragma once

#include <cstdint>

#include "kernels/attention/attention.h"

namespace millipede::cpu {

// Shapes and settings shared by every item of one AttentionCpu call.
struct AttentionCpuShape {
  const AttentionArgs* args;
  int64_t n_q, num_q_heads, head_dim, n_kv, num_kv_heads, group;
  float scale;
  // The keys and values the items read: args.k and args.v, or F32 copies of them.
  ConstTensorView k, v;
};

// One item: KV head `kv_head`, query rows [q_begin, q_end), keys [k_begin, k_end). Writes the
// normalised output of its query rows and heads into o ([n_q, num_q_heads, head_dim] layout) and,
// when lse is not null, their LSE ([n_q, num_q_heads]); rows that see no key get 0 and -inf.
struct AttentionCpuItem {
  int64_t kv_head;
  int64_t q_begin, q_end;
  int64_t k_begin, k_end;
  float* o;
  float* lse;
};

void AttentionCpuBlock(const AttentionCpuShape& shape, const AttentionCpuItem& item);

}  // namespace millipede::cpu
