#include "worker/attention/patterns/dense_pattern.h"

namespace millipede {
namespace {

class DenseVariant final : public PrefillPatternVariant {
 public:
  PrefillPattern pattern() const override { return PrefillPattern::kDense; }
  PrefillKernel kernel() const override { return PrefillKernel::kRing; }
};

}  // namespace

const PrefillPatternVariant& DensePattern() {
  static const DenseVariant variant;
  return variant;
}

}  // namespace millipede
