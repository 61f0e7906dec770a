// libFuzzer entry point: the GGUF parser must return a Status, never crash, on any bytes, and
// whatever it accepts must dequantize without reading outside the input.
// Build with -DMILLIPEDE_FUZZERS=ON and clang; run ./gguf_fuzzer [corpus_dir].
#include <cstddef>
#include <cstdint>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_dequant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  millipede::StatusOr<millipede::GgufFile> file = millipede::GgufFile::Parse(data, size, "fuzz");
  if (!file.ok()) return 0;
  for (const millipede::GgufTensorInfo& t : file->tensors()) {
    // Accepted tensors must describe byte ranges inside the input.
    if (t.data < data || t.data + t.num_bytes > data + size) __builtin_trap();
    if (t.num_elements <= (int64_t{1} << 16)) {
      millipede::StatusOr<millipede::HostTensor> out =
          millipede::DequantizeTensor(t, millipede::DType::kBF16);
      if (!out.ok()) __builtin_trap();
    }
  }
  return 0;
}
