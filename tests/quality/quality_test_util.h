// Shared helpers for the quality tests: the retrieval model written once per process to a
// temporary folder, and its tokenizer, vocabulary and haystack.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "common/file_util.h"
#include "models/retrieval_model.h"
#include "quality/runner.h"
#include "quality/tasks.h"

namespace millipede::testing {

// The model directory for weights stored as `dtype`, written on first use (removed at exit).
inline const std::string& RetrievalModelDir(DType dtype) {
  static std::map<DType, std::string> dirs;
  auto it = dirs.find(dtype);
  if (it != dirs.end()) return it->second;
  std::string tmpl = (std::filesystem::temp_directory_path() / "retrieval_model_XXXXXX").string();
  const char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr);
  const Status s = WriteRetrievalModel(tmpl, dtype);
  EXPECT_TRUE(s.ok()) << s.ToString();
  static struct Cleanup {
    std::map<DType, std::string>* d;
    ~Cleanup() {
      for (auto& [k, dir] : *d) std::filesystem::remove_all(dir);
    }
  } cleanup{&dirs};
  return dirs.emplace(dtype, tmpl).first->second;
}

struct RetrievalFixtureData {
  std::unique_ptr<Tokenizer> tokenizer;
  RetrievalVocab vocab;
  std::unique_ptr<Haystack> haystack;
};

inline const RetrievalFixtureData& RetrievalData() {
  static RetrievalFixtureData* data = [] {
    auto* d = new RetrievalFixtureData;
    auto json = RetrievalTokenizerJson();
    EXPECT_TRUE(json.ok());
    auto tok = Tokenizer::FromJson(*json, "retrieval tokenizer");
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    d->tokenizer = std::move(tok).value();
    auto vocab = RetrievalVocab::FromTokenizer(*d->tokenizer);
    EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
    d->vocab = *vocab;
    auto hay = Haystack::Create(*d->tokenizer, d->vocab);
    EXPECT_TRUE(hay.ok());
    d->haystack = std::make_unique<Haystack>(std::move(hay).value());
    return d;
  }();
  return *data;
}

inline QualityTask MustMakeTask(const TaskSpec& spec) {
  auto t = MakeTask(*RetrievalData().haystack, spec);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

}  // namespace millipede::testing
