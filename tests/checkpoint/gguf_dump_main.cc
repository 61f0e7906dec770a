// Test tool for the GGUF oracle test: opens a GGUF file with GgufFile, prints its metadata and
// tensor infos as JSON on stdout and writes each tensor dequantized to fp32 (DequantizeTensor) as
// raw little-endian floats, one file per tensor: OUT_DIR/<index in file order>.f32.
//   gguf_dump FILE [OUT_DIR] [--only NAME,NAME,...]
// Without OUT_DIR no tensor data is written; with --only just the named tensors are. JSON:
//   {"version": 3, "alignment": 32,
//    "metadata": [{"key": k, "type": "uint32", "value": 7},
//                 {"key": k, "type": "array", "element_type": "int32", "value": [1, 2]},
//                 {"key": k, "type": "array", "element_type": "array",
//                  "value": [{"element_type": "string", "value": ["a"]}, ...]}, ...],
//    "tensors": [{"name": n, "type": "Q4_K", "ne": [256, 3], "offset": 0, "num_bytes": 432,
//                 "file": "0.f32"}, ...]}
// (metadata in file order; "file" only for tensors written). Exit 1 with the error on stderr
// when the file is refused.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_dequant.h"
#include "common/json_util.h"

namespace millipede {
namespace {

Json ValueJson(const GgufValue& v);

// An array's elements: plain values, or for arrays of arrays one object per inner array.
Json ArrayJson(const GgufValue& v) {
  Json out = Json::array();
  for (const GgufValue& e : v.array) {
    if (e.type == GgufValue::Type::kArray) {
      out.push_back(Json{{"element_type", GgufValueTypeName(e.array_type)},
                         {"value", ArrayJson(e)}});
    } else {
      out.push_back(ValueJson(e));
    }
  }
  return out;
}

Json ValueJson(const GgufValue& v) {
  using T = GgufValue::Type;
  switch (v.type) {
    case T::kUint8:
    case T::kUint16:
    case T::kUint32:
    case T::kUint64: return Json(v.u);
    case T::kInt8:
    case T::kInt16:
    case T::kInt32:
    case T::kInt64: return Json(v.i);
    case T::kFloat32:
    case T::kFloat64: return Json(v.f);
    case T::kBool: return Json(v.u != 0);
    case T::kString: return Json(v.s);
    case T::kArray: return ArrayJson(v);
  }
  return Json();
}

int Run(int argc, char** argv) {
  std::string path, out_dir;
  std::set<std::string> only;
  bool filter = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--only" && i + 1 < argc) {
      filter = true;
      std::stringstream names(argv[++i]);
      for (std::string name; std::getline(names, name, ',');) only.insert(name);
    } else if (path.empty()) {
      path = arg;
    } else if (out_dir.empty()) {
      out_dir = arg;
    } else {
      std::cerr << "usage: gguf_dump FILE [OUT_DIR] [--only NAME,...]\n";
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << "usage: gguf_dump FILE [OUT_DIR] [--only NAME,...]\n";
    return 2;
  }
  StatusOr<GgufFile> file = GgufFile::Open(path);
  if (!file.ok()) {
    std::cerr << file.status().ToString() << "\n";
    return 1;
  }
  Json doc{{"version", file->version()}, {"alignment", file->alignment()}};
  Json metadata = Json::array();
  for (const std::string& key : file->keys()) {
    const GgufValue& v = *file->Find(key);
    Json entry{{"key", key}, {"type", GgufValueTypeName(v.type)}};
    if (v.type == GgufValue::Type::kArray) {
      entry["element_type"] = GgufValueTypeName(v.array_type);
    }
    entry["value"] = ValueJson(v);
    metadata.push_back(std::move(entry));
  }
  doc["metadata"] = std::move(metadata);
  Json tensors = Json::array();
  for (size_t i = 0; i < file->tensors().size(); ++i) {
    const GgufTensorInfo& t = file->tensors()[i];
    Json entry{{"name", t.name},     {"type", GgmlTypeName(t.type)},   {"ne", t.ne},
               {"offset", t.offset}, {"num_bytes", t.num_bytes}};
    if (!out_dir.empty() && (!filter || only.count(t.name) != 0)) {
      StatusOr<HostTensor> values = DequantizeTensor(t, DType::kF32);
      if (!values.ok()) {
        std::cerr << values.status().ToString() << "\n";
        return 1;
      }
      const std::string name = std::to_string(i) + ".f32";
      std::ofstream out(out_dir + "/" + name, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(values->data<float>()),
                static_cast<std::streamsize>(values->NumBytes()));
      if (!out.good()) {
        std::cerr << "cannot write " << out_dir << "/" << name << "\n";
        return 1;
      }
      entry["file"] = name;
    }
    tensors.push_back(std::move(entry));
  }
  doc["tensors"] = std::move(tensors);
  // ASCII output (\u escapes) so that the reader's locale does not matter; invalid UTF-8 in a
  // string is an error (the test files hold none).
  std::cout << doc.dump(-1, ' ', /*ensure_ascii=*/true) << "\n";
  return 0;
}

}  // namespace
}  // namespace millipede

int main(int argc, char** argv) {
  try {
    return millipede::Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gguf_dump: " << e.what() << "\n";
    return 1;
  }
}
