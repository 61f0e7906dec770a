#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace millipede::tokenizer_internal {
namespace {

// Ids index a dense table; real vocabularies stay far below this.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// A pending merge of the symbol at `pos` with the one after it.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // Lowest rank first, then leftmost, as HF's merge loop pops them.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& json, RawBpeTables tables,
                                                       const std::string& what) {
  MP_REQUIRE(json.is_object(), what, ": expected an object, got ", json.type_name());
  MP_ASSIGN_OR_RETURN(std::string type, JsonGetStringOr(json, "type", "BPE", what));
  if (type == "WordPiece" || type == "Unigram" || type == "WordLevel") {
    return UnimplementedError(what + ": model type \"" + type + "\" is not supported (only BPE)");
  }
  MP_REQUIRE(type == "BPE", what, ": unknown model type \"", type, "\"");
  if (json.contains("dropout") && !json["dropout"].is_null()) {
    MP_ASSIGN_OR_RETURN(double dropout, JsonGetNumber(json, "dropout", what));
    if (dropout != 0.0) return UnimplementedError(what + ": BPE dropout is not supported");
  }
  auto model = std::make_unique<BpeModel>();
  MP_ASSIGN_OR_RETURN(model->continuing_subword_prefix_,
                      JsonGetStringOr(json, "continuing_subword_prefix", "", what));
  MP_ASSIGN_OR_RETURN(model->end_of_word_suffix_,
                      JsonGetStringOr(json, "end_of_word_suffix", "", what));
  MP_ASSIGN_OR_RETURN(model->fuse_unk_, JsonGetBoolOr(json, "fuse_unk", false, what));
  MP_ASSIGN_OR_RETURN(model->ignore_merges_, JsonGetBoolOr(json, "ignore_merges", false, what));
  MP_ASSIGN_OR_RETURN(model->byte_fallback_, JsonGetBoolOr(json, "byte_fallback", false, what));

  // The entries themselves were pulled out of the document while parsing (tokenizer_json.h).
  MP_REQUIRE(json.contains("vocab") && json["vocab"].is_object(), what,
             ": missing \"vocab\" object");
  model->vocab_.Reserve(tables.vocab.size());
  int64_t max_id = -1;
  for (const RawVocabEntry& entry : tables.vocab) {
    MP_REQUIRE(entry.is_integer, what, ": vocab entry \"", entry.token,
               "\" must map to an integer id");
    MP_REQUIRE(entry.id >= 0 && entry.id <= kMaxTokenId, what, ": vocab id ", entry.id, " of \"",
               entry.token, "\" is out of range [0, ", kMaxTokenId, "]");
    model->vocab_.Insert(entry.token, static_cast<int32_t>(entry.id));
    max_id = std::max(max_id, entry.id);
  }
  model->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  model->id_used_.resize(static_cast<size_t>(max_id + 1));
  for (RawVocabEntry& entry : tables.vocab) {
    // Two tokens sharing an id is tolerated (HF does); the id decodes to the first.
    if (model->id_used_[entry.id]) continue;
    model->id_used_[entry.id] = true;
    model->id_to_token_[entry.id] = std::move(entry.token);
  }

  if (json.contains("unk_token") && !json["unk_token"].is_null()) {
    MP_ASSIGN_OR_RETURN(std::string unk, JsonGetString(json, "unk_token", what));
    std::optional<int32_t> unk_id = model->TokenToId(unk);
    MP_REQUIRE(unk_id.has_value(), what, ": unk_token \"", unk, "\" is not in the vocab");
    model->unk_id_ = *unk_id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    model->byte_fallback_ids_[b] = model->TokenToId(name).value_or(-1);
  }

  MP_REQUIRE(json.contains("merges") && json["merges"].is_array(), what,
             ": missing \"merges\" array");
  model->merges_.Reserve(tables.merges.size());
  for (size_t rank = 0; rank < tables.merges.size(); ++rank) {
    const RawMerge& m = tables.merges[rank];
    // Built only for error messages, so lazily: loading runs through ~10^5 merges.
    auto where = [&] { return what + ".merges[" + std::to_string(rank) + "]"; };
    std::string_view first = m.first;
    std::string_view second = m.second;
    if (m.form == RawMerge::Form::kLine) {
      size_t space = first.find(' ');
      MP_REQUIRE(space != std::string::npos && first.find(' ', space + 1) == std::string::npos,
                 where(), ": \"", first, "\" is not two tokens separated by one space");
      second = first.substr(space + 1);
      first = first.substr(0, space);
    } else if (m.form != RawMerge::Form::kPair || m.parts != 2) {
      return InvalidArgumentError(where() + ": a merge must be \"a b\" or [\"a\", \"b\"]");
    }
    MP_RETURN_IF_ERROR(model->AddMerge(first, second, static_cast<int32_t>(rank), where));
  }
  return model;
}

Status BpeModel::AddMerge(std::string_view a, std::string_view b, int32_t rank,
                          const std::function<std::string()>& where) {
  int32_t a_id = vocab_.Find(a);
  int32_t b_id = vocab_.Find(b);
  MP_REQUIRE(a_id >= 0, where(), ": token \"", a, "\" is not in the vocab");
  MP_REQUIRE(b_id >= 0, where(), ": token \"", b, "\" is not in the vocab");
  std::string merged(a);
  std::string_view tail = b;
  const std::string& prefix = continuing_subword_prefix_;
  if (!prefix.empty() && tail.substr(0, prefix.size()) == prefix) tail.remove_prefix(prefix.size());
  merged.append(tail);
  int32_t new_id = vocab_.Find(merged);
  MP_REQUIRE(new_id >= 0, where(), ": merged token \"", merged, "\" is not in the vocab");
  // A repeated pair keeps its last rank, as HF's map of merges does.
  merges_.Assign(a_id, b_id, MergeTable::Merge{rank, new_id});
  return OkStatus();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  int32_t id = vocab_.Find(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<std::string_view> BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_used_[id]) {
    return std::nullopt;
  }
  return id_to_token_[id];
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<int32_t>* symbols) const {
  int32_t pending_unk = -1;  // an unk symbol not yet emitted, so that fuse_unk can extend it
  std::string scratch;
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t begin = pos;
    pos += Utf8SequenceLength(static_cast<unsigned char>(piece[pos]));
    std::string_view ch = piece.substr(begin, pos - begin);
    bool decorate = (begin > 0 && !continuing_subword_prefix_.empty()) ||
                    (pos >= piece.size() && !end_of_word_suffix_.empty());
    if (decorate) {
      scratch.clear();
      if (begin > 0) scratch += continuing_subword_prefix_;
      scratch += ch;
      if (pos >= piece.size()) scratch += end_of_word_suffix_;
      ch = scratch;
    }
    if (int32_t id = vocab_.Find(ch); id >= 0) {
      if (pending_unk >= 0) symbols->push_back(pending_unk);
      pending_unk = -1;
      symbols->push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : ch) all_bytes = all_bytes && byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) symbols->push_back(byte_fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;
    if (pending_unk >= 0 && !fuse_unk_) symbols->push_back(pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk >= 0) symbols->push_back(pending_unk);
}

void BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (int32_t id = vocab_.Find(piece); id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  InitialSymbols(piece, &symbols);
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) {
    ids->insert(ids->end(), symbols.begin(), symbols.end());
    return;
  }
  // A doubly linked list over `symbols`: merged-away entries are unlinked and marked -1.
  std::vector<int32_t> prev(n), next(n);
  std::priority_queue<Candidate> queue;
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n) {
      if (const MergeTable::Merge* m = merges_.Find(symbols[i], symbols[i + 1])) {
        queue.push({m->rank, i, m->new_id});
      }
    }
  }
  auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    if (const MergeTable::Merge* m = merges_.Find(symbols[left], symbols[next[left]])) {
      queue.push({m->rank, left, m->new_id});
    }
  };
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    int32_t right = next[top.pos];
    if (symbols[top.pos] < 0 || right < 0) continue;
    // Stale entries (either side merged since they were queued) no longer name this pair.
    const MergeTable::Merge* m = merges_.Find(symbols[top.pos], symbols[right]);
    if (m == nullptr || m->new_id != top.new_id) continue;
    symbols[top.pos] = top.new_id;
    symbols[right] = -1;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    consider(prev[top.pos]);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) ids->push_back(symbols[i]);
}

}  // namespace millipede::tokenizer_internal
