// DuoAttention gates to policies: the TSV as numpy writes it, clipping, errors naming line and
// column, the threshold and sparsity rules (the sparsity checked against numpy.quantile's
// definition computed here), the streaming heads' parameters and the shape checks.
#include "policy/duo_import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "policy/policy_writer.h"

namespace millipede {
namespace {

ModelConfig Shape(int64_t layers, int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  return c;
}

// numpy.savetxt's default format, tab-separated.
std::string Tsv(const std::vector<std::vector<double>>& rows) {
  std::string out;
  for (const std::vector<double>& row : rows) {
    for (size_t h = 0; h < row.size(); ++h) {
      char buffer[64];
      std::snprintf(buffer, sizeof(buffer), "%.18e", row[h]);
      if (h > 0) out += '\t';
      out += buffer;
    }
    out += "\n";
  }
  return out;
}

DuoGates ParseOk(const std::string& text) {
  StatusOr<DuoGates> g = ParseDuoGates(text, "gates.tsv");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : DuoGates{};
}

std::string ParseError(const std::string& text) {
  StatusOr<DuoGates> g = ParseDuoGates(text, "gates.tsv");
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? "" : g.status().message();
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

DuoImportOptions Threshold(double t) {
  DuoImportOptions o;
  o.threshold = t;
  o.sizes = {64, 256};
  return o;
}
DuoImportOptions Sparsity(double q) {
  DuoImportOptions o;
  o.sparsity = q;
  o.sizes = {64, 256};
  return o;
}

PolicyImport ImportOk(const DuoGates& gates, const ModelConfig& model, const DuoImportOptions& o) {
  StatusOr<PolicyImport> r = ImportDuoGates(gates, model, o, "gates.tsv");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  EXPECT_TRUE(
      ValidateAttentionPolicy(r->policy, model.num_hidden_layers, model.num_key_value_heads).ok());
  StatusOr<AttentionPolicy> back = ParseAttentionPolicy(
      AttentionPolicyToJson(r->policy), model.num_hidden_layers, model.num_key_value_heads);
  EXPECT_TRUE(back.ok() && *back == r->policy);
  return *r;
}

// Whether each head (row-major) is a retrieval head in the policy, checking both halves agree.
std::vector<bool> Retrieval(const AttentionPolicy& p) {
  std::vector<bool> out;
  for (const LayerPolicy& layer : p.layers) {
    for (size_t h = 0; h < layer.decode.size(); ++h) {
      const bool full = layer.decode[h] == DecodeRole::kFull;
      EXPECT_EQ(full, layer.prefill[h].pattern == PrefillPattern::kDense);
      out.push_back(full);
    }
  }
  return out;
}

TEST(DuoImportTest, ParsesNumpyOutputAndClipsTheOvershoot) {
  const DuoGates g = ParseOk(Tsv({{0.859375, -9.25e-05, 1.0}, {1.0003, 0.5, 2.2e-05}}));
  EXPECT_EQ(g.num_layers, 2);
  EXPECT_EQ(g.num_kv_heads, 3);
  EXPECT_EQ(g.at(0, 0), 0.859375);
  EXPECT_EQ(g.at(0, 1), 0.0);
  EXPECT_EQ(g.at(1, 0), 1.0);
  EXPECT_EQ(g.at(1, 2), 2.2e-05);
  // CRLF, blank and comment lines, no final newline, a tiny value that underflows.
  const DuoGates h = ParseOk("# gates\r\n0.25\t1e-400\r\n\r\n0.75\t1");
  EXPECT_EQ(h.num_layers, 2);
  EXPECT_EQ(h.at(0, 1), 0.0);
  EXPECT_EQ(h.at(1, 1), 1.0);
}

TEST(DuoImportTest, BadFilesNameLineAndColumn) {
  EXPECT_HAS(ParseError("0.5\t0.5\n0.5\tabc\n"),
             "gates.tsv: line 2, column 2: \"abc\" is not a finite number");
  EXPECT_HAS(ParseError("0.5\tnan\n"), "line 1, column 2: \"nan\" is not a finite number");
  EXPECT_HAS(ParseError("0.5\t0.5\n\n0.5\tinf\n"), "line 3, column 2");
  EXPECT_HAS(ParseError("0.5\t0.5\n1.2\t0.5\n"), "line 2, column 1: gate 1.2 is outside [0, 1]");
  EXPECT_HAS(ParseError("-0.3\t0.5\n"), "line 1, column 1: gate -0.3 is outside");
  EXPECT_HAS(ParseError("0.5\t\t0.5\n"), "line 1, column 2: empty field");
  EXPECT_HAS(ParseError("0.5 0.5\n"), "line 1, column 1: \"0.5 0.5\" is not a finite number");
  EXPECT_HAS(ParseError("0.5\t0.5\n0.5\t0.5\t0.5\n"), "line 2 has 3 columns but line 1 has 2");
  EXPECT_HAS(ParseError("# only a comment\n\n"), "no gates");
}

TEST(DuoImportTest, ThresholdSplitsRetrievalFromStreamingHeads) {
  const DuoGates g = ParseOk(Tsv({{0.9, 0.1, 0.5}, {0.49, 1.0, 0.0}}));
  DuoImportOptions o = Threshold(0.5);
  o.sizes = {128, 1024};
  o.dense_below_tokens = 2048;
  const PolicyImport r = ImportOk(g, Shape(2, 6, 3), o);
  EXPECT_EQ(Retrieval(r.policy), (std::vector<bool>{true, false, true, false, true, false}));
  EXPECT_EQ(r.retrieval_heads, 3);
  EXPECT_EQ(r.policy.dense_below_tokens, 2048);
  EXPECT_EQ(r.policy.streaming_head, (AShapeParams{128, 1024}));
  const HeadPrefillPolicy& streaming = r.policy.layers[0].prefill[1];
  EXPECT_EQ(streaming.pattern, PrefillPattern::kAShape);
  EXPECT_EQ(streaming.a_shape, (AShapeParams{128, 1024}));
  EXPECT_EQ(r.policy.layers[0].decode[1], DecodeRole::kStreamingHead);
  EXPECT_TRUE(r.policy.layers[0].MixedDecode());
}

// numpy.quantile's default (linear) definition, which DuoAttention uses for a sparsity.
double NumpyQuantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

TEST(DuoImportTest, SparsityKeepsTheHeadsAtOrAboveNumpysQuantile) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (auto [layers, kv_heads] : {std::pair<int64_t, int64_t>{32, 8}, {5, 3}, {1, 1}, {7, 4}}) {
    std::vector<std::vector<double>> rows(layers, std::vector<double>(kv_heads));
    std::vector<double> all;
    for (auto& row : rows)
      for (double& x : row) all.push_back(x = u(rng));
    const DuoGates g = ParseOk(Tsv(rows));
    for (double q : {0.0, 0.1, 0.25, 0.5, 0.7, 0.75, 0.9, 0.999, 1.0}) {
      const PolicyImport r = ImportOk(g, Shape(layers, kv_heads * 4, kv_heads), Sparsity(q));
      const double threshold = NumpyQuantile(all, q);
      std::vector<bool> want;
      for (double x : all) want.push_back(q < 1 && x >= threshold);
      EXPECT_EQ(Retrieval(r.policy), want) << layers << "x" << kv_heads << " q " << q;
    }
  }
}

TEST(DuoImportTest, TiedGatesStreamInLayerThenHeadOrder) {
  // Six gates of 1.0 (clipped) and two below: half streaming takes the two low ones, then the
  // tied heads in order (ceil(0.5 * 7) = 4 streaming heads).
  const DuoGates g = ParseOk(Tsv({{1.0, 1.0004, 0.2, 1.0}, {1.0, 0.1, 1.0, 1.0}}));
  const PolicyImport r = ImportOk(g, Shape(2, 4, 4), Sparsity(0.5));
  EXPECT_EQ(Retrieval(r.policy),
            (std::vector<bool>{false, false, false, true, true, false, true, true}));
  EXPECT_EQ(r.retrieval_heads, 4);
  // Forty equal gates: the first ceil(0.5 * 39) = 20 stream.
  const DuoGates equal = ParseOk(Tsv(std::vector<std::vector<double>>(10, {0.5, 0.5, 0.5, 0.5})));
  const PolicyImport all_tied = ImportOk(equal, Shape(10, 4, 4), Sparsity(0.5));
  std::vector<bool> want(40, true);
  std::fill(want.begin(), want.begin() + 20, false);
  EXPECT_EQ(Retrieval(all_tied.policy), want);
}

TEST(DuoImportTest, RefusesShapesAndOptionsThatDoNotFit) {
  const DuoGates g = ParseOk(Tsv({{0.1, 0.2}, {0.3, 0.4}}));
  const auto error = [&](const ModelConfig& m, const DuoImportOptions& o) {
    StatusOr<PolicyImport> r = ImportDuoGates(g, m, o, "gates.tsv");
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_HAS(error(Shape(3, 4, 2), Threshold(0.5)),
             "gates.tsv has 2 rows (layers) but the model has 3 layers");
  EXPECT_HAS(error(Shape(2, 8, 4), Threshold(0.5)),
             "gates.tsv has 2 columns (KV heads) but the model has 4 KV heads");
  EXPECT_HAS(error(Shape(2, 2, 1), Threshold(0.5)),
             "that is its number of query heads; DuoAttention writes one gate per KV head");
  DuoImportOptions both = Threshold(0.5);
  both.sparsity = 0.5;
  EXPECT_HAS(error(Shape(2, 4, 2), both), "exactly one of a threshold and a sparsity");
  EXPECT_HAS(error(Shape(2, 4, 2), Sparsity(1.5)), "must be in [0, 1], got 1.5");
  EXPECT_HAS(error(Shape(2, 4, 2), Threshold(std::nan(""))), "threshold must be finite");
  DuoImportOptions no_sink = Threshold(0.5);
  no_sink.sizes.sink = 0;
  EXPECT_HAS(error(Shape(2, 4, 2), no_sink), "positive sink and recent sizes, got 0 and 256");
}

TEST(DuoImportTest, ReadsSinkAndRecentFromDuoAttentionsConfig) {
  StatusOr<DuoStreamingSizes> s = ParseDuoPatternConfig(
      R"({"model_name": "m", "sink_size": 128, "recent_size": 256, "threshold": 0.5})", "c.json");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->sink, 128);
  EXPECT_EQ(s->recent, 256);
  StatusOr<DuoStreamingSizes> missing = ParseDuoPatternConfig(R"({"sink_size": 128})", "c.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_HAS(missing.status().message(), "c.json: missing field \"recent_size\"");
  StatusOr<DuoStreamingSizes> zero =
      ParseDuoPatternConfig(R"({"sink_size": 0, "recent_size": 256})", "c.json");
  ASSERT_FALSE(zero.ok());
  EXPECT_HAS(zero.status().message(), "must be positive");
}

}  // namespace
}  // namespace millipede
