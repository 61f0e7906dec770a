// Internal to AttentionCpu: the work of one (KV head, query block, key range) item.
#pragma once

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_state.h"

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

// The pieces of a block that SparseAttentionCpu shares: the query rows [q_begin, q_end) of the
// q heads of KV head `kv_head`, packed as (row, head of the group) rows of head_dim floats.
struct AttentionCpuRows {
  int64_t num_q_heads, head_dim, group, kv_head;
  int64_t q_begin, q_end;
  int64_t Count() const { return (q_end - q_begin) * group; }
};
// out[(t - q_begin) * group + hl] = scale * q[t, kv_head * group + hl] ([n_q, num_q_heads,
// head_dim] F32 q).
void AttentionCpuPackQueries(const AttentionCpuRows& rows, const float* q, float scale, float* out);
// One online-softmax step: scores [rows, width] (-inf for masked keys) become each row's
// probabilities relative to its merged running state, and o_acc [rows, head_dim] is rescaled, so
// that P V can be added into it.
void AttentionCpuSoftmaxTile(float* scores, int64_t rows, int64_t width, int64_t head_dim,
                             AttentionState* state, float* o_acc);
// The normalised output of the packed rows into o ([n_q, num_q_heads, head_dim]) and, unless
// null, their LSE into lse ([n_q, num_q_heads]); rows that saw no key get 0 and -inf.
void AttentionCpuWriteRows(const AttentionCpuRows& rows, const AttentionState* state,
                           const float* o_acc, float* o, float* lse);

}  // namespace millipede::cpu
