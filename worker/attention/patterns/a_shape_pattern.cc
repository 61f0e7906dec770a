#include "worker/attention/patterns/a_shape_pattern.h"

namespace millipede {
namespace {

class AShapeVariant final : public PrefillPatternVariant {
 public:
  PrefillPattern pattern() const override { return PrefillPattern::kAShape; }
  PrefillKernel kernel() const override { return PrefillKernel::kRing; }
  RingHeadMask RingMask(const HeadPrefillPolicy& head) const override {
    return {head.a_shape.window_tokens, head.a_shape.sink_tokens};
  }
};

}  // namespace

const PrefillPatternVariant& AShapePattern() {
  static const AShapeVariant variant;
  return variant;
}

}  // namespace millipede
