#include "models/retrieval_model.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include "checkpoint/model_tensors.h"
#include "checkpoint/safetensors_writer.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "models/model_presets.h"
#include "tokenizer/bpe_trainer.h"

namespace millipede {
namespace {

// Residual stream layout (hidden 512; unused dimensions stay 0). Every token embedding has eight
// entries of +-1 (its four role entries and the four ballast ones), so its mean square is 1/64
// and RMSNorm turns each entry into +-8 at the first layer.
constexpr int kAnswer = 0;       // [32] what retrieval heads write: one-hot of the value found
constexpr int kValueCode = 32;   // [32] a needle's value, one-hot
constexpr int kKeyCode = 64;     // [16] a needle's key, signed one-hot (see CodeIndex)
constexpr int kQueryCode = 80;   // [16] a query token's key, signed one-hot
constexpr int kAlways = 96;      // 1 in every token
constexpr int kSinkQuery = 97;   // 1 in every token that is not a query: look at the sink
constexpr int kBosFlag = 98;     // 1 in BOS: the attention sink's key
constexpr int kQueryFlag = 99;   // 1 in query tokens: a weak pull to the sink
constexpr int kPad0 = 100;       // pads, so that every token has four entries besides ballast
constexpr int kPad1 = 101;
constexpr int kBallast = 102;    // [4] 1 in every token, read by nothing: with hidden 512 they keep
                                 // the embeddings' mean square at 8 / 512 = 1/64

constexpr int kHidden = 512;
constexpr int kLayers = 3;
constexpr int kHeads = 8;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 64;
constexpr int kBallastDims = 4;
constexpr int kCodeDims = 16;  // signed one-hot: 16 dimensions carry 32 symbols

// Rotary pair j of a head is dims (j, j + 32) with frequency theta^(-2j/64) = 10^(-0.5625 j)
// for theta 1e18. The slowest pairs, 23..31, turn by at most 1.2e-7 rad over 2^20 positions;
// their 18 dimensions (23..31 and 55..63) carry content: key codes on the first 16, the sink on
// the 17th. Pairs 4, 6 and 8 (5.6e-3, 4.2e-4 and 3.2e-5 rad per position) give local heads
// their recency.
constexpr int kSlowPair = 23;
int SlowDim(int i) { return i < 9 ? kSlowPair + i : kSlowPair + kHeadDim / 2 + (i - 9); }
constexpr int kSinkSlot = 16;
constexpr int kRecencyDims[] = {4, 6, 8};

// Symbol s is +e_(s mod 16) for s < 16 and -e_(s mod 16) above: two keys are orthogonal or
// (s, s + 16) opposite, never alike.
int CodeIndex(int s) { return s % kCodeDims; }
float CodeSign(int s) { return s < kCodeDims ? 1.0f : -1.0f; }

// Weights of query and key projections (short binary fractions). With RMSNorm entries of 8 and
// the softmax scale 1/sqrt(64) = 1/8, a query weight wq meeting a key weight wk on one dimension
// scores 8 * 8 * wq * wk / 8 = 8 wq wk (docs/quality.md): 8 * 3 * 2 = 48 for a matching needle.
constexpr float kMatchQ = 3.0f, kMatchK = 2.0f;
constexpr float kSinkK = 2.0f;          // BOS key on the sink dimension
constexpr float kSinkQNonQuery = 3.0f;  // non-query tokens: score 48 on BOS
constexpr float kSinkQQuery = 0.375f;   // query tokens: score 6 on BOS
// Local heads: BOS scores 14 (even heads) or 17 (odd heads); each recency pair adds
// 8 * 17/16 * 1/2 cos(f_j d) = 4.25 cos(f_j d), pairs {4, 6} (even) or {4, 6, 8} (odd).
constexpr float kLocalSinkQEven = 0.875f, kLocalSinkQOdd = 1.0625f;
constexpr float kLocalRecencyQ = 1.0625f, kLocalRecencyK = 0.5f;
constexpr float kValueV = 0.125f;       // v = one-hot of the needle's value
constexpr float kAnswerO = 0.0625f;     // 4 retrieval heads per layer write 1/4 each layer
constexpr float kAnswerLogit = 8.0f;    // LM head on the answer dimensions
constexpr float kNoneLogit = 0.5f;      // LM head of <none> on the always-on dimension

// Which KV head (and so which 4 query heads) retrieves in `layer`; -1: none (all local).
int RetrievalKvHead(int layer) { return layer == 0 ? -1 : (layer - 1) % kKvHeads; }

void Set(HostTensor& t, int64_t row, int64_t col, float v) {
  StoreFromFloat(t.view().data, t.dtype(), static_cast<size_t>(row * t.shape()[1] + col), v);
}

void Fill(HostTensor& t, float v) {
  for (int64_t i = 0; i < t.NumElements(); ++i)
    StoreFromFloat(t.view().data, t.dtype(), static_cast<size_t>(i), v);
}

// Token embeddings by role.
void BuildEmbedding(const RetrievalVocab& vocab, HostTensor& e) {
  for (int64_t id = 0; id < e.shape()[0]; ++id) {
    Set(e, id, kAlways, 1);
    Set(e, id, kSinkQuery, 1);
    Set(e, id, kPad0, 1);
    Set(e, id, kPad1, 1);
    for (int i = 0; i < kBallastDims; ++i) Set(e, id, kBallast + i, 1);
  }
  auto clear = [&](int32_t id) {
    for (int c : {kAlways, kSinkQuery, kPad0, kPad1}) Set(e, id, c, 0);
  };
  clear(vocab.bos);
  for (int c : {kAlways, kSinkQuery, kBosFlag, kPad0}) Set(e, vocab.bos, c, 1);
  for (int s = 0; s < kRetrievalSymbols; ++s) {
    for (int32_t id : {vocab.key_ids[s], vocab.value_ids[s]}) {
      clear(id);
      for (int c : {kAlways, kQueryFlag, kPad0}) Set(e, id, c, 1);
      Set(e, id, kQueryCode + CodeIndex(s), CodeSign(s));
    }
  }
  for (int a = 0; a < kRetrievalSymbols; ++a) {
    for (int b = 0; b < kRetrievalSymbols; ++b) {
      const int32_t id = vocab.needle(a, b);
      clear(id);
      Set(e, id, kAlways, 1);
      Set(e, id, kSinkQuery, 1);
      Set(e, id, kKeyCode + CodeIndex(a), CodeSign(a));
      Set(e, id, kValueCode + b, 1);
    }
  }
}

void BuildAttention(int layer, HostTensor& q, HostTensor& k, HostTensor& v, HostTensor& o) {
  for (int g = 0; g < kKvHeads; ++g) {
    const int base = g * kHeadDim;
    for (int i = 0; i < kCodeDims; ++i) Set(k, base + SlowDim(i), kKeyCode + i, kMatchK);
    Set(k, base + SlowDim(kSinkSlot), kBosFlag, kSinkK);
    // Recency keys for every token but BOS, whose score must not depend on its distance.
    for (int j : kRecencyDims) {
      Set(k, base + j, kAlways, kLocalRecencyK);
      Set(k, base + j, kBosFlag, -kLocalRecencyK);
    }
    for (int b = 0; b < kRetrievalSymbols; ++b) Set(v, base + b, kValueCode + b, kValueV);
  }
  const int group = kHeads / kKvHeads;
  for (int h = 0; h < kHeads; ++h) {
    const int base = h * kHeadDim;
    if (h / group == RetrievalKvHead(layer)) {
      for (int i = 0; i < kCodeDims; ++i) Set(q, base + SlowDim(i), kQueryCode + i, kMatchQ);
      Set(q, base + SlowDim(kSinkSlot), kSinkQuery, kSinkQNonQuery);
      Set(q, base + SlowDim(kSinkSlot), kQueryFlag, kSinkQQuery);
      for (int b = 0; b < kRetrievalSymbols; ++b) Set(o, kAnswer + b, base + b, kAnswerO);
    } else {
      // A local (streaming) head: the sink plus recency from fast rotary pairs.
      const bool odd = h % 2 == 1;
      Set(q, base + SlowDim(kSinkSlot), kAlways, odd ? kLocalSinkQOdd : kLocalSinkQEven);
      for (int r = 0; r < (odd ? 3 : 2); ++r)
        Set(q, base + kRecencyDims[r], kAlways, kLocalRecencyQ);
    }
  }
}

}  // namespace

std::vector<std::string> RetrievalHaystackSentences() {
  // Written for this project: plain sentences with no task tokens in them.
  return {
      " The river runs slowly past the old mill and under the stone bridge.",
      " Farmers bring apples, pears and plums to the market every Saturday morning.",
      " A long train of wagons crossed the valley before the sun went down.",
      " The library keeps its maps of the coast in a wide wooden cabinet.",
      " Children learn to count by sorting shells and pebbles into small piles.",
      " Rain fell on the roofs of the town for three days without a pause.",
      " The baker lights the oven long before the first customer arrives.",
      " Geese fly south in a loose line when the evenings grow cold.",
      " An old clock in the hall strikes the hour a little late.",
      " The gardener plants beans along the fence and onions near the path.",
      " Ships wait outside the harbour until the tide is high enough.",
      " A quiet reader turns the pages of a thick book about the stars.",
  };
}

std::string RetrievalKeyToken(int symbol) { return "<k" + std::to_string(symbol) + ">"; }
std::string RetrievalValueToken(int symbol) { return "<v" + std::to_string(symbol) + ">"; }
std::string RetrievalNeedleToken(int key, int value) {
  return "<k" + std::to_string(key) + ":v" + std::to_string(value) + ">";
}

StatusOr<std::string> RetrievalTokenizerJson() {
  std::vector<std::string> added = {kRetrievalBosToken, kRetrievalEosToken, kRetrievalFillerToken,
                                    kRetrievalNoneToken};
  for (int s = 0; s < kRetrievalSymbols; ++s) added.push_back(RetrievalKeyToken(s));
  for (int s = 0; s < kRetrievalSymbols; ++s) added.push_back(RetrievalValueToken(s));
  for (int a = 0; a < kRetrievalSymbols; ++a)
    for (int b = 0; b < kRetrievalSymbols; ++b) added.push_back(RetrievalNeedleToken(a, b));
  MP_ASSIGN_OR_RETURN(std::string text,
                      TrainByteLevelBpe(RetrievalHaystackSentences(), 400, added));
  // Only BOS and EOS are special: the task tokens must show in decoded text.
  using OrderedJson = nlohmann::ordered_json;
  OrderedJson j = OrderedJson::parse(text);
  int64_t bos_id = -1;
  for (auto& t : j["added_tokens"]) {
    const std::string content = t["content"];
    t["special"] = content == kRetrievalBosToken || content == kRetrievalEosToken;
    if (content == kRetrievalBosToken) bos_id = t["id"];
  }
  // As Llama 3's: encoding with special tokens (HF's default, millipede-run's) starts with BOS,
  // the attention sink of the construction.
  auto piece = [](const char* kind, const std::string& id, int type_id) {
    OrderedJson inner = OrderedJson::object();
    inner["id"] = id;
    inner["type_id"] = type_id;
    OrderedJson p = OrderedJson::object();
    p[kind] = inner;
    return p;
  };
  OrderedJson templ = OrderedJson::object();
  templ["type"] = "TemplateProcessing";
  templ["single"] = OrderedJson::array(
      {piece("SpecialToken", kRetrievalBosToken, 0), piece("Sequence", "A", 0)});
  templ["pair"] = OrderedJson::array(
      {piece("SpecialToken", kRetrievalBosToken, 0), piece("Sequence", "A", 0),
       piece("SpecialToken", kRetrievalBosToken, 1), piece("Sequence", "B", 1)});
  OrderedJson bos_entry = OrderedJson::object();
  bos_entry["id"] = kRetrievalBosToken;
  bos_entry["ids"] = OrderedJson::array({bos_id});
  bos_entry["tokens"] = OrderedJson::array({kRetrievalBosToken});
  templ["special_tokens"] = OrderedJson::object();
  templ["special_tokens"][kRetrievalBosToken] = bos_entry;
  OrderedJson sequence = OrderedJson::object();
  sequence["type"] = "Sequence";
  sequence["processors"] = OrderedJson::array({j["post_processor"], templ});
  j["post_processor"] = sequence;
  return j.dump(2) + "\n";
}

int RetrievalVocab::ValueSymbol(int32_t id) const {
  for (int s = 0; s < kRetrievalSymbols; ++s)
    if (value_ids[s] == id) return s;
  return -1;
}

StatusOr<RetrievalVocab> RetrievalVocab::FromTokenizer(const Tokenizer& tokenizer) {
  RetrievalVocab v;
  auto id_of = [&](const std::string& token) -> StatusOr<int32_t> {
    auto id = tokenizer.TokenToId(token);
    if (!id) return NotFoundError("the tokenizer has no retrieval token " + token);
    return *id;
  };
  MP_ASSIGN_OR_RETURN(v.bos, id_of(kRetrievalBosToken));
  MP_ASSIGN_OR_RETURN(v.eos, id_of(kRetrievalEosToken));
  MP_ASSIGN_OR_RETURN(v.filler, id_of(kRetrievalFillerToken));
  MP_ASSIGN_OR_RETURN(v.none, id_of(kRetrievalNoneToken));
  for (int s = 0; s < kRetrievalSymbols; ++s) {
    MP_ASSIGN_OR_RETURN(int32_t k, id_of(RetrievalKeyToken(s)));
    MP_ASSIGN_OR_RETURN(int32_t val, id_of(RetrievalValueToken(s)));
    v.key_ids.push_back(k);
    v.value_ids.push_back(val);
  }
  for (int a = 0; a < kRetrievalSymbols; ++a) {
    for (int b = 0; b < kRetrievalSymbols; ++b) {
      MP_ASSIGN_OR_RETURN(int32_t n, id_of(RetrievalNeedleToken(a, b)));
      v.needle_ids.push_back(n);
    }
  }
  v.vocab_size = tokenizer.vocab_size();
  return v;
}

Status CheckRetrievalConfig(const ModelConfig& c, const RetrievalVocab& vocab) {
  MP_RETURN_IF_ERROR(ValidateModelConfig(c));
  MP_REQUIRE(c.model_type == "llama" && c.hidden_size == kHidden &&
                 c.num_hidden_layers == kLayers && c.num_attention_heads == kHeads &&
                 c.num_key_value_heads == kKvHeads && c.head_dim == kHeadDim,
             "the retrieval construction needs the \"retrieval\" preset's shape (llama, hidden ",
             kHidden, ", ", kLayers, " layers, ", kHeads, "/", kKvHeads, " heads, head_dim ",
             kHeadDim, ")");
  MP_REQUIRE(c.rope_theta >= 1e18 && c.rope_scaling.type == RopeScalingType::kNone,
             "the retrieval construction needs rope_theta >= 1e18 and no rope scaling");
  MP_REQUIRE(!c.qkv_bias && !c.o_proj_bias && !c.mlp_bias && !c.tie_word_embeddings &&
                 c.sliding_window == 0,
             "the retrieval construction needs no biases, untied embeddings, full attention");
  MP_REQUIRE(c.vocab_size >= vocab.vocab_size, "vocab_size ", c.vocab_size,
             " is smaller than the tokenizer's ", vocab.vocab_size);
  return OkStatus();
}

StatusOr<std::vector<NamedHostTensor>> BuildRetrievalWeights(const ModelConfig& c,
                                                             const RetrievalVocab& vocab,
                                                             DType dtype) {
  MP_RETURN_IF_ERROR(CheckRetrievalConfig(c, vocab));
  MP_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
             "retrieval weights: dtype must be F32, BF16 or F16, got ", DTypeName(dtype));
  std::vector<NamedHostTensor> out;
  std::map<std::string, size_t> index;
  for (const ExpectedTensor& e : ExpectedModelTensors(c)) {
    index[e.name] = out.size();
    out.push_back({e.name, HostTensor(dtype, e.shape)});
    const bool is_norm = e.name.ends_with("norm.weight");
    Fill(out.back().tensor, is_norm ? 1.0f : 0.0f);  // the MLP stays 0: it adds nothing
  }
  auto get = [&](const std::string& name) -> HostTensor& { return out[index.at(name)].tensor; };
  BuildEmbedding(vocab, get("model.embed_tokens.weight"));
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    BuildAttention(l, get(p + "q_proj.weight"), get(p + "k_proj.weight"),
                   get(p + "v_proj.weight"), get(p + "o_proj.weight"));
  }
  HostTensor& lm = get("lm_head.weight");
  for (int s = 0; s < kRetrievalSymbols; ++s)
    Set(lm, vocab.value_ids[s], kAnswer + s, kAnswerLogit);
  Set(lm, vocab.none, kAlways, kNoneLogit);
  return out;
}

Status WriteRetrievalModel(const std::string& dir, DType dtype) {
  MP_ASSIGN_OR_RETURN(std::string tokenizer_json, RetrievalTokenizerJson());
  MP_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromJson(tokenizer_json, "tokenizer.json"));
  MP_ASSIGN_OR_RETURN(RetrievalVocab vocab, RetrievalVocab::FromTokenizer(*tokenizer));
  MP_ASSIGN_OR_RETURN(ModelConfig config, ModelPreset("retrieval"));
  config.vocab_size = vocab.vocab_size;
  config.bos_token_id = vocab.bos;
  config.eos_token_ids = {vocab.eos};
  config.torch_dtype = dtype == DType::kF32 ? "float32" : dtype == DType::kF16 ? "float16"
                                                                               : "bfloat16";
  MP_ASSIGN_OR_RETURN(std::vector<NamedHostTensor> tensors,
                      BuildRetrievalWeights(config, vocab, dtype));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return IoError("cannot create " + dir + ": " + std::strerror(errno));
  std::vector<NamedTensor> views;
  for (const auto& t : tensors) views.emplace_back(t.name, t.tensor.view());
  MP_RETURN_IF_ERROR(
      WriteSafetensors(JoinPath(dir, "model.safetensors"), views, {{"format", "pt"}}));
  MP_RETURN_IF_ERROR(
      WriteStringToFile(JoinPath(dir, "config.json"), ModelConfigToJson(config).dump(2) + "\n"));
  return WriteStringToFile(JoinPath(dir, "tokenizer.json"), tokenizer_json);
}

}  // namespace millipede
