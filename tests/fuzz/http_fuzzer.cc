// libFuzzer entry point: raw bytes through the HTTP front end (FuzzHttpRequest). Built with
// -DMILLIPEDE_FUZZ=ON and clang (docs/operations.md, "Fuzzing").
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto result =
      millipede::fuzz::FuzzHttpRequest(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!result.ok()) {
    // A broken invariant is a finding like a crash: libFuzzer saves the input.
    std::fprintf(stderr, "http_fuzzer: %s\n", result.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
