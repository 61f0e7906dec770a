// millipede_fuzz_seeds DIR: writes the seed corpus (seed_corpus.h) for libFuzzer, one file per
// input, into DIR/http and DIR/capnp.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/fuzz/seed_corpus.h"

namespace {

bool WriteAll(const std::filesystem::path& dir, const std::vector<std::string>& inputs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return false;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "seed-%05zu", i);
    std::ofstream out(dir / name, std::ios::binary);
    out.write(inputs[i].data(), static_cast<std::streamsize>(inputs[i].size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
      return false;
    }
  }
  std::printf("%zu seeds in %s\n", inputs.size(), dir.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: millipede_fuzz_seeds DIR  (writes DIR/http and DIR/capnp)\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  bool ok = WriteAll(dir / "http", millipede::fuzz::HttpSeeds());
  ok = WriteAll(dir / "capnp", millipede::fuzz::JobSpecSeeds()) && ok;
  return ok ? 0 : 1;
}
