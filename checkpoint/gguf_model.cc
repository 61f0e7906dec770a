#include "checkpoint/gguf_model.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <optional>
#include <string>

#include "checkpoint/gguf_dequant.h"
#include "checkpoint/model_tensors.h"
#include "common/file_util.h"

namespace millipede {
namespace {

// The reader's errors already name the file and the key. A key the model needs that is absent
// (NotFound from the reader) or of the wrong type makes the file malformed: InvalidArgument.
template <typename T>
StatusOr<T> Malformed(StatusOr<T> v) {
  if (v.ok()) return v;
  return InvalidArgumentError(v.status().message());
}

// Reads {arch}.* keys.
class ArchKeys {
 public:
  ArchKeys(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string Key(const char* suffix) const { return arch_ + "." + suffix; }
  bool Has(const char* suffix) const { return file_.Find(Key(suffix)) != nullptr; }
  StatusOr<int64_t> Int(const char* suffix) const { return Malformed(file_.GetInt(Key(suffix))); }
  StatusOr<int64_t> IntOr(const char* suffix, int64_t fallback) const {
    return Has(suffix) ? Int(suffix) : StatusOr<int64_t>(fallback);
  }
  StatusOr<double> FloatOr(const char* suffix, double fallback) const {
    return Has(suffix) ? Malformed(file_.GetFloat(Key(suffix))) : StatusOr<double>(fallback);
  }
  StatusOr<std::string> StringOr(const char* suffix, const std::string& fallback) const {
    return Has(suffix) ? Malformed(file_.GetString(Key(suffix))) : StatusOr<std::string>(fallback);
  }

 private:
  const GgufFile& file_;
  std::string arch_;
};

Status ReadSizes(const ArchKeys& k, ModelConfig* c) {
  MP_ASSIGN_OR_RETURN(c->max_position_embeddings, k.Int("context_length"));
  MP_ASSIGN_OR_RETURN(c->hidden_size, k.Int("embedding_length"));
  MP_ASSIGN_OR_RETURN(c->intermediate_size, k.Int("feed_forward_length"));
  MP_ASSIGN_OR_RETURN(c->num_hidden_layers, k.Int("block_count"));
  MP_ASSIGN_OR_RETURN(c->num_attention_heads, k.Int("attention.head_count"));
  MP_ASSIGN_OR_RETURN(c->num_key_value_heads,
                      k.IntOr("attention.head_count_kv", c->num_attention_heads));
  MP_REQUIRE(c->num_attention_heads > 0, k.Key("attention.head_count"), " must be positive");
  MP_ASSIGN_OR_RETURN(c->head_dim,
                      k.IntOr("attention.key_length", c->hidden_size / c->num_attention_heads));
  MP_ASSIGN_OR_RETURN(int64_t value_length, k.IntOr("attention.value_length", c->head_dim));
  MP_REQUIRE(value_length == c->head_dim, k.Key("attention.value_length"), " ", value_length,
             " differs from the key length ", c->head_dim, " (not supported)");
  MP_ASSIGN_OR_RETURN(int64_t rope_dims, k.IntOr("rope.dimension_count", c->head_dim));
  MP_REQUIRE(rope_dims == c->head_dim, k.Key("rope.dimension_count"), " ", rope_dims,
             " rotates part of each head of ", c->head_dim, " (partial RoPE is not supported)");
  MP_ASSIGN_OR_RETURN(c->rms_norm_eps, k.FloatOr("attention.layer_norm_rms_epsilon", 1e-5));
  MP_ASSIGN_OR_RETURN(c->rope_theta, k.FloatOr("rope.freq_base", 10000.0));
  return OkStatus();
}

Status ReadRopeScaling(const GgufFile& file, const ArchKeys& k, ModelConfig* c) {
  MP_REQUIRE(file.FindTensor("rope_freqs.weight") == nullptr, file.path(),
             ": tensor rope_freqs.weight (per-dimension RoPE factors, as Llama 3.1 files carry) "
             "is not supported");
  MP_ASSIGN_OR_RETURN(std::string type, k.StringOr("rope.scaling.type", "none"));
  MP_ASSIGN_OR_RETURN(double old_linear, k.FloatOr("rope.scale_linear", 1.0));
  if (type == "none" && old_linear != 1.0) type = "linear";
  if (type == "none") return OkStatus();
  MP_REQUIRE(type == "linear", file.path(), ": ", k.Key("rope.scaling.type"), " \"", type,
             "\" is not supported (supported: none, linear)");
  c->rope_scaling.type = RopeScalingType::kLinear;
  MP_ASSIGN_OR_RETURN(c->rope_scaling.factor, k.FloatOr("rope.scaling.factor", old_linear));
  return OkStatus();
}

Status ReadTokenIds(const GgufFile& file, ModelConfig* c) {
  auto id = [&](const char* key) -> StatusOr<std::optional<int32_t>> {
    if (file.Find(key) == nullptr) return std::optional<int32_t>();
    MP_ASSIGN_OR_RETURN(int64_t v, Malformed(file.GetInt(key)));
    MP_REQUIRE(v >= 0 && v <= INT32_MAX, file.path(), ": ", key, " ", v, " is not a token id");
    return std::optional<int32_t>(static_cast<int32_t>(v));
  };
  MP_ASSIGN_OR_RETURN(c->bos_token_id, id("tokenizer.ggml.bos_token_id"));
  MP_ASSIGN_OR_RETURN(std::optional<int32_t> eos, id("tokenizer.ggml.eos_token_id"));
  if (eos) c->eos_token_ids.push_back(*eos);
  return OkStatus();
}

bool PermutesQk(const std::string& model_type) { return model_type != "qwen2"; }

// Undoes the converter's per-head row interleave (see the header) of a [heads * d, ...] tensor.
void UnpermuteHeads(int64_t heads, HostTensor* t) {
  const int64_t rows = t->shape().dims[0];
  const int64_t d = rows / heads, half = d / 2;
  const size_t row_bytes = t->NumBytes() / static_cast<size_t>(rows);
  HostTensor out(t->dtype(), t->shape());
  const char* src = t->data<char>();
  char* dst = out.data<char>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t two = 0; two < 2; ++two)
      for (int64_t j = 0; j < half; ++j)
        std::memcpy(dst + static_cast<size_t>(h * d + two * half + j) * row_bytes,
                    src + static_cast<size_t>(h * d + 2 * j + two) * row_bytes, row_bytes);
  *t = std::move(out);
}

std::string ShapeText(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank; ++i) out += (i ? ", " : "") + std::to_string(s.dims[i]);
  return out + "]";
}

}  // namespace

bool IsGgufFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

StatusOr<ModelConfig> LoadModelConfigAt(const std::string& path) {
  if (!IsGgufFile(path)) {
    std::error_code ec;
    MP_REQUIRE(!std::filesystem::is_regular_file(path, ec), path,
               " is a file but not a GGUF file (it does not start with \"GGUF\"); a model is a "
               "GGUF file or a Hugging Face directory");
    return LoadModelConfig(JoinPath(path, "config.json"));
  }
  MP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  return ModelConfigFromGguf(file);
}

std::string GgufTensorName(const std::string& hf_name) {
  static const std::map<std::string, std::string> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm", "attn_norm"},       {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},         {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},    {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},          {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  if (auto it = kTop.find(hf_name); it != kTop.end()) return it->second;
  const std::string prefix = "model.layers.";
  if (hf_name.rfind(prefix, 0) != 0) return "";
  const size_t dot = hf_name.find('.', prefix.size());
  const size_t last = hf_name.rfind('.');
  if (dot == std::string::npos || last <= dot) return "";
  const std::string layer = hf_name.substr(prefix.size(), dot - prefix.size());
  const std::string part = hf_name.substr(dot + 1, last - dot - 1);
  const std::string kind = hf_name.substr(last + 1);
  auto it = kLayer.find(part);
  if (it == kLayer.end() || (kind != "weight" && kind != "bias")) return "";
  return "blk." + layer + "." + it->second + "." + kind;
}

StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& file) {
  StatusOr<std::string> arch = Malformed(file.GetString("general.architecture"));
  MP_RETURN_IF_ERROR(arch.status());
  MP_REQUIRE(*arch == "llama" || *arch == "mistral" || *arch == "qwen2", file.path(),
             ": general.architecture \"", *arch,
             "\" is not supported (supported: llama, mistral, qwen2)");
  ModelConfig c;
  c.model_type = *arch;
  c.torch_dtype = "gguf";
  const ArchKeys k(file, *arch);
  MP_RETURN_IF_ERROR(ReadSizes(k, &c));
  MP_RETURN_IF_ERROR(ReadRopeScaling(file, k, &c));
  if (*arch == "mistral") {
    MP_ASSIGN_OR_RETURN(c.sliding_window, k.IntOr("attention.sliding_window", 0));
  }
  c.qkv_bias = *arch == "qwen2";
  const GgufTensorInfo* embed = file.FindTensor("token_embd.weight");
  MP_REQUIRE(embed != nullptr && embed->ne.size() == 2, file.path(),
             ": tensor token_embd.weight is missing or not a matrix");
  MP_ASSIGN_OR_RETURN(c.vocab_size, k.IntOr("vocab_size", embed->ne[1]));
  c.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  MP_RETURN_IF_ERROR(ReadTokenIds(file, &c));
  Status valid = ValidateModelConfig(c);
  MP_REQUIRE(valid.ok(), file.path(), ": ", valid.message());
  return c;
}

StatusOr<std::vector<NamedHostTensor>> LoadGgufWeights(const GgufFile& file,
                                                       const ModelConfig& config, DType dtype) {
  MP_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
             "GGUF weights dequantise to f32, bf16 or f16, not ", DTypeName(dtype));
  std::vector<NamedHostTensor> out;
  std::set<std::string> used;
  for (const ExpectedTensor& want : ExpectedModelTensors(config)) {
    const std::string name = GgufTensorName(want.name);
    const GgufTensorInfo* info = file.FindTensor(name);
    MP_REQUIRE(info != nullptr, file.path(), ": tensor ", name, " (", want.name, ") is missing");
    Shape have;
    have.rank = static_cast<int>(info->ne.size());
    for (int i = 0; i < have.rank; ++i) have.dims[i] = info->ne[info->ne.size() - 1 - i];
    MP_REQUIRE(have == want.shape, file.path(), ": tensor ", name, " has shape ",
               ShapeText(have), ", the config implies ", ShapeText(want.shape));
    MP_ASSIGN_OR_RETURN(HostTensor t, DequantizeTensor(*info, dtype));
    if (PermutesQk(config.model_type)) {
      if (name.find(".attn_q.") != std::string::npos) UnpermuteHeads(config.num_attention_heads, &t);
      if (name.find(".attn_k.") != std::string::npos) UnpermuteHeads(config.num_key_value_heads, &t);
    }
    used.insert(name);
    out.push_back({want.name, std::move(t)});
  }
  for (const GgufTensorInfo& t : file.tensors())
    MP_REQUIRE(used.count(t.name) != 0, file.path(), ": tensor ", t.name,
               " is not part of a ", config.model_type, " model of this config");
  return out;
}

}  // namespace millipede
