// libFuzzer entry point: the header parser must return a Status, never crash, on any bytes.
// Build with -DMILLIPEDE_FUZZERS=ON and clang; run ./safetensors_fuzzer [corpus_dir].
#include <cstddef>
#include <cstdint>

#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  millipede::StatusOr<millipede::SafetensorsHeader> header =
      millipede::ParseSafetensorsHeader(data, size, "fuzz");
  if (header.ok()) {
    // Accepted headers must describe byte ranges inside the input.
    for (const millipede::TensorInfo& t : header->tensors) {
      if (header->data_offset + t.offset_end > size) __builtin_trap();
    }
  }
  return 0;
}
