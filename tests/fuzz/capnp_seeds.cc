// Cap'n Proto seeds: JobSpec messages in the flat wire form (segment table, then segments), each
// a valid spec changed in one field (edge numbers, NaN and infinities, bad UTF-8, oversized
// lists, policy JSON edge cases), and hand-made malformed messages.
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "rpc/millipede.capnp.h"
#include "tests/fuzz/seed_corpus.h"

namespace millipede::fuzz {
namespace {

using rpc::JobSpec;

std::string Flat(capnp::MallocMessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// A spec admission accepts; each seed below changes it in one place.
void FillValid(JobSpec::Builder spec) {
  spec.getPrompt().setText("Hello there");
  spec.setMaxNewTokens(4);
  auto s = spec.initSampling();
  s.setTemperature(0.7f);
  s.setTopK(5);
  s.setTopP(0.9f);
  s.setSeed(7);
  s.setRepetitionPenalty(1.1f);
  s.setPresencePenalty(0.1f);
  s.setFrequencyPenalty(0.2f);
  s.setMinP(0.05f);
  auto bias = s.initLogitBias(2);
  bias[0].setId(5);
  bias[0].setBias(1.5f);
  bias[1].setId(7);
  bias[1].setBias(-100);
  s.setLogprobs(2);
  spec.initStopIds(1).set(0, 3);
  spec.initStopStrings(1).set(0, "fox");
}

template <typename Edit>
std::string Variant(Edit edit) {
  capnp::MallocMessageBuilder message;
  JobSpec::Builder spec = message.initRoot<JobSpec>();
  FillValid(spec);
  edit(spec);
  return Flat(message);
}

const std::vector<float>& FloatEdges() {
  using F = std::numeric_limits<float>;
  static const std::vector<float> values = {F::quiet_NaN(), -F::quiet_NaN(), F::signaling_NaN(),
                                            F::infinity(),  -F::infinity(),  -0.0f,
                                            0.0f,           F::max(),        -F::max(),
                                            F::min(),       F::denorm_min(), -F::denorm_min(),
                                            1.0f,           -1.0f,           2.0f,
                                            -2.0f,          2.0000002f,      -2.0000002f,
                                            100.0f,         100.00001f,      -100.00001f,
                                            1e-30f};
  return values;
}

const std::vector<int64_t>& IntEdges() {
  static const std::vector<int64_t> values = {
      std::numeric_limits<int32_t>::min(), -2, -1, 0, 1, 20, 21, 255, 256, 1023, 1024, 4095, 4096,
      std::numeric_limits<int32_t>::max()};
  return values;
}

const std::vector<std::string>& TextEdges() {
  static const std::vector<std::string> values = {"",
                                                  std::string("a\0b", 3),
                                                  "\xff",
                                                  "\xc0\x80",
                                                  "\xed\xa0\x80",
                                                  "\xe2\x82",
                                                  "\xf4\x90\x80\x80",
                                                  "\xf0\x9f\x98\x80",
                                                  "<|eot_id|>",
                                                  "<|begin_of_text|>",
                                                  std::string(257, 's'),
                                                  std::string(2000, 'a')};
  return values;
}

void SamplingSeeds(std::vector<std::string>* seeds) {
  using Sampling = rpc::Sampling::Builder;
  const std::vector<void (*)(Sampling, float)> float_fields = {
      [](Sampling s, float v) { s.setTemperature(v); },
      [](Sampling s, float v) { s.setTopP(v); },
      [](Sampling s, float v) { s.setRepetitionPenalty(v); },
      [](Sampling s, float v) { s.setPresencePenalty(v); },
      [](Sampling s, float v) { s.setFrequencyPenalty(v); },
      [](Sampling s, float v) { s.setMinP(v); },
      [](Sampling s, float v) { s.getLogitBias()[0].setBias(v); }};
  for (auto set : float_fields) {
    for (float v : FloatEdges()) {
      seeds->push_back(Variant([&](JobSpec::Builder spec) { set(spec.getSampling(), v); }));
    }
  }
  const std::vector<void (*)(JobSpec::Builder, int32_t)> int_fields = {
      [](JobSpec::Builder s, int32_t v) { s.getSampling().setTopK(v); },
      [](JobSpec::Builder s, int32_t v) { s.getSampling().setLogprobs(v); },
      [](JobSpec::Builder s, int32_t v) { s.getSampling().getLogitBias()[0].setId(v); },
      [](JobSpec::Builder s, int32_t v) { s.getStopIds().set(0, v); },
      [](JobSpec::Builder s, int32_t v) { s.getPrompt().initIds(2).set(0, v); }};
  for (auto set : int_fields) {
    for (int64_t v : IntEdges()) {
      seeds->push_back(Variant([&](JobSpec::Builder spec) { set(spec, static_cast<int32_t>(v)); }));
    }
  }
  for (uint64_t seed : {uint64_t{0}, std::numeric_limits<uint64_t>::max()}) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) { spec.getSampling().setSeed(seed); }));
  }
  // Oversized and duplicate logit bias lists.
  for (unsigned n : {1024u, 1025u}) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) {
      auto bias = spec.getSampling().initLogitBias(n);
      for (unsigned i = 0; i < n; ++i) bias[i].setId(static_cast<int32_t>(i % 300));
    }));
  }
}

void SpecSeeds(std::vector<std::string>* seeds) {
  for (int64_t v :
       {std::numeric_limits<int64_t>::min(), int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{4095},
        int64_t{4096}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) { spec.setMaxNewTokens(v); }));
  }
  for (const std::string& text : TextEdges()) {
    kj::ArrayPtr<const kj::byte> bytes(reinterpret_cast<const kj::byte*>(text.data()), text.size());
    seeds->push_back(Variant([&](JobSpec::Builder spec) {
      // As raw bytes: setText would add its own terminator after an embedded NUL.
      spec.getPrompt().initText(static_cast<unsigned>(text.size()));
      std::copy(bytes.begin(), bytes.end(), spec.getPrompt().getText().asBytes().begin());
    }));
    seeds->push_back(Variant([&](JobSpec::Builder spec) {
      spec.getStopStrings().set(0, kj::StringPtr(text.c_str(), text.size()));
    }));
  }
  seeds->push_back(Variant([](JobSpec::Builder spec) {
    spec.getPrompt().initText(300000);  // over the admission's 256 KiB
  }));
  for (unsigned n : {0u, 1u, 65536u, 65537u}) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) {
      auto ids = spec.getPrompt().initIds(n);
      for (unsigned i = 0; i < n; ++i) ids.set(i, static_cast<int32_t>(i % 200));
    }));
  }
  for (unsigned n : {16u, 17u}) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) {
      auto stops = spec.initStopStrings(n);
      for (unsigned i = 0; i < n; ++i) stops.set(i, "s");
    }));
  }
  for (unsigned n : {256u, 257u}) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) { spec.initStopIds(n); }));
  }
}

void PolicySeeds(std::vector<std::string>* seeds) {
  std::vector<std::string> policies = {
      R"({"version": 1})",
      R"({"version": 1, "default": {"prefill": "a-shape", "decode": "full"},
          "layers": [{"layer": 1, "a_shape": [{"window_tokens": 7}, null],
                      "decode": ["streaming-head", "full"]}]})",
      R"({"version": 1, "layers": [{"layer": 0, "decode": ["filter", "full"]}]})",
      R"({"version": 1, "default": {"prefill": "vertical-slash"}})",
      R"({"version": 1, "layers": [{"layer": 3, "prefill": ["block-sparse", "dense"]}]})",
      "{not json",
      "",
      "null",
      "[]",
      "{}"};
  for (const std::string& n : NumberEdgeCases()) {
    policies.push_back(R"({"version": )" + n + "}");
    policies.push_back(R"({"version": 1, "layers": [{"layer": )" + n + "}]}");
    policies.push_back(R"({"version": 1, "layers": [{"layer": 0, "a_shape": [{"window_tokens": )" +
                       n + "}]}]}");
  }
  for (const std::string& s : StringEdgeCases()) {
    policies.push_back(R"({"version": 1, "default": {"prefill": )" + s + "}}");
  }
  for (const std::string& deep : NestingEdgeCases()) policies.push_back(deep);
  for (const std::string& policy : policies) {
    seeds->push_back(Variant([&](JobSpec::Builder spec) {
      spec.setPolicyJson(kj::StringPtr(policy.c_str(), policy.size()));
    }));
  }
}

// Words of a hand-made message, little-endian as on the wire.
std::string Words(const std::vector<uint64_t>& words) {
  std::string out;
  for (uint64_t w : words) {
    for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>((w >> (8 * b)) & 0xff));
  }
  return out;
}

void MalformedSeeds(std::vector<std::string>* seeds) {
  // Segment table word: (segment count - 1) in the low half, the first segment's words above.
  auto table = [](uint64_t count_minus_one, uint64_t words) {
    return count_minus_one | (words << 32);
  };
  // A struct pointer: offset (30 bits) << 2, data words << 32, pointer count << 48.
  auto struct_ptr = [](int64_t offset, uint64_t data, uint64_t ptrs) {
    return (static_cast<uint64_t>(offset & 0x3fffffff) << 2) | (data << 32) | (ptrs << 48);
  };
  seeds->push_back("");
  seeds->push_back(Words({0}));
  seeds->push_back(Words({table(0, 1), 0}));                       // null root: defaults
  seeds->push_back(Words({table(0, 2), struct_ptr(0, 1, 0), 7}));  // a short struct
  seeds->push_back(Words({table(0, 1), struct_ptr(-1, 0, 1)}));    // a struct that is itself
  seeds->push_back(Words({table(0, 1), struct_ptr(1000, 2, 5)}));  // out of the segment
  seeds->push_back(Words({table(0xffffffff, 1), 0}));              // 2^32 segments
  seeds->push_back(Words({table(0, 0xffffffff), 0}));              // a segment larger than sent
  seeds->push_back(Words({table(1, 1), 2, 0, 0}));                 // two segments
  // A far pointer into a segment that is not there.
  seeds->push_back(Words({table(0, 1), 2 | (uint64_t{5} << 32)}));
  // A prompt text (byte list pointer) of 2^29 - 1 bytes in a three-word segment.
  const uint64_t text_ptr = 1 | (uint64_t{2} << 32) | (uint64_t{0x1fffffff} << 35);
  seeds->push_back(Words({table(0, 3), struct_ptr(0, 0, 1), text_ptr, 0}));
}

}  // namespace

std::vector<std::string> JobSpecSeeds() {
  std::vector<std::string> seeds;
  seeds.push_back(Variant([](JobSpec::Builder) {}));
  seeds.push_back(Variant([](JobSpec::Builder spec) {
    auto ids = spec.getPrompt().initIds(3);
    ids.set(0, 1);
    ids.set(1, 2);
    ids.set(2, 3);
  }));
  SamplingSeeds(&seeds);
  SpecSeeds(&seeds);
  PolicySeeds(&seeds);
  MalformedSeeds(&seeds);
  return seeds;
}

}  // namespace millipede::fuzz
