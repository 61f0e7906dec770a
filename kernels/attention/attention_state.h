// AttentionState: the one log-sum-exp merge rule of the project. Split-KV decode, ring-attention
// steps, cross-rank decode merges and the attention kernels' own online softmax all combine
// partial results through it, so -inf handling lives in exactly one place. Header-only; usable
// from host code and CUDA device code.
#pragma once

#include <math.h>

#include "kernels/host_device.h"

namespace millipede {

// Softmax statistics of attention over some set of keys with scores s_j (natural-log domain,
// already multiplied by the softmax scale):
//   m = max_j s_j,  d = sum_j exp(s_j - m).
// The empty set is m = -inf, d = 0. Its output accumulator o_acc = sum_j exp(s_j - m) * v_j
// is kept by the caller (registers on a GPU, a row on the host) because its length, head_dim,
// is the caller's business; every update returns the Factors to apply to it.
//
// A finished part is (o, lse) with o = o_acc / d and lse = m + log(d); FromLse() turns it back
// into a state whose o_acc is exactly o (m = lse, d = 1).
//
// T is float on devices and double in the CPU references.
template <typename T>
struct AttentionStateT {
  // How to update the accumulator after Merge: acc' = self * acc + other * other_acc.
  // A factor of exactly 0 means "do not read that side": an empty part's o may hold anything
  // (even NaN), and a weight that underflowed to 0 contributes nothing either way.
  struct Factors {
    T self;
    T other;
    MP_HOST_DEVICE T Apply(T acc, T other_acc) const {
      return (self != T(0) ? self * acc : T(0)) + (other != T(0) ? other * other_acc : T(0));
    }
  };

  T m;  // running max score; -inf when empty
  T d;  // sum of exp(s_j - m); 0 when empty

  MP_HOST_DEVICE static AttentionStateT Empty() { return {T(-INFINITY), T(0)}; }
  // The state of a finished part with this log-sum-exp; -inf gives the empty state.
  // lse must not be NaN or +inf.
  MP_HOST_DEVICE static AttentionStateT FromLse(T lse) {
    return lse == T(-INFINITY) ? Empty() : AttentionStateT{lse, T(1)};
  }
  MP_HOST_DEVICE bool IsEmpty() const { return m == T(-INFINITY); }

  // Makes this the state of the union of both (disjoint) key sets. Merging an empty state is the
  // identity; two empty states stay empty. Only finite differences reach exp(), so neither
  // exp(-inf - -inf) nor an overflow can occur, however large |m| is.
  MP_HOST_DEVICE Factors Merge(const AttentionStateT& other) {
    // An empty side's accumulator is meaningless, so its factor is 0 even when it is this one.
    if (other.IsEmpty()) return {IsEmpty() ? T(0) : T(1), T(0)};
    if (IsEmpty()) {
      *this = other;
      return {T(0), T(1)};
    }
    T new_m = m > other.m ? m : other.m;
    T self_scale = Exp(m - new_m);
    T other_scale = Exp(other.m - new_m);
    d = d * self_scale + other.d * other_scale;
    m = new_m;
    return {self_scale, other_scale};
  }
  // Adds one key with score s (-inf: a masked key, the identity). Factors.other weights v_j.
  MP_HOST_DEVICE Factors AddScore(T s) { return Merge(FromLse(s)); }

  // The online softmax's step, Merge with a part whose maximum is already the new one: moves the
  // state to m_new (>= m; m_new = -inf only while both are empty) and adds sum, the new keys'
  // sum of exp(s_j - m_new). Returns what o_acc must be scaled by before the new keys' weighted
  // values are added: exp(m - m_new), or 0 when this state was empty. exp2(x) computes 2^x, so a
  // kernel passes its one-instruction form (one exponential per step, no branch besides the
  // empty test).
  template <typename Exp2>
  MP_HOST_DEVICE T AdvanceTo(T m_new, T sum, Exp2 exp2) {
    const T factor = IsEmpty() ? T(0) : exp2((m - m_new) * T(1.4426950408889634));
    d = d * factor + sum;
    m = m_new;
    return factor;
  }

  // log(sum_j exp(s_j)); -inf when empty.
  MP_HOST_DEVICE T Lse() const { return IsEmpty() ? T(-INFINITY) : m + Log(d); }
  // Multiplier turning o_acc into the output: 1/d, or 0 when empty (so o = 0, never NaN).
  MP_HOST_DEVICE T OutputScale() const { return IsEmpty() ? T(0) : T(1) / d; }

 private:
  MP_HOST_DEVICE static float Exp(float x) { return expf(x); }
  MP_HOST_DEVICE static double Exp(double x) { return exp(x); }
  MP_HOST_DEVICE static float Log(float x) { return logf(x); }
  MP_HOST_DEVICE static double Log(double x) { return log(x); }
};

using AttentionState = AttentionStateT<float>;

}  // namespace millipede
