#!/usr/bin/env python3
"""The GGUF reader and dequantisers against llama.cpp's own Python package `gguf` (gguf==0.19.0).

Files are written with gguf.GGUFWriter: metadata of every value type (arrays of each, nested
arrays, extreme integers, non-ASCII strings) and tensors of every supported ggml type, both
quantized from random data by gguf.quants.quantize (the types it can quantize) and made of raw
random blocks with sane f16 scale fields (every block type, the K-quants included), in shapes of
several blocks per row and several rows (1 to 4 dimensions). gguf_dump (GgufFile and
DequantizeTensor to fp32) must print the metadata that was written and write, for every tensor,
exactly the floats gguf.quants.dequantize gives: compared bit for bit, as the dequantisers follow
ggml's reference order of fp32 operations. The same file with its version field patched to 2 must
read the same, and so must a file written with a custom general.alignment. When SmolLM2's GGUF
file is present (argument 2), its metadata and tensor infos are compared with gguf.GGUFReader's
and a few of its tensors (token_embd Q8_0, a Q4_1 and an F32 one) with gguf's dequantisation.
  gguf_oracle_test.py GGUF_DUMP_BINARY [REAL_MODEL.gguf]
Exit status: 0 all agree, 1 a difference, 77 (skipped) when numpy or gguf cannot be imported.
"""
import importlib.metadata
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as V
    from gguf.quants import dequantize, quantize
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: needs numpy and gguf ({e})")
    sys.exit(77)

FAILURES = []


def fail(message):
    FAILURES.append(message)
    print("FAIL:", message)


# ---------------------------------------------------------------------------------------------
# Metadata: (key, value, type, element type of an array or None).
METADATA = [
    ("test.u8", 255, V.UINT8, None),
    ("test.i8", -128, V.INT8, None),
    ("test.u16", 65535, V.UINT16, None),
    ("test.i16", -32768, V.INT16, None),
    ("test.u32", 4294967295, V.UINT32, None),
    ("test.i32", -2147483648, V.INT32, None),
    ("test.u64", 2**64 - 1, V.UINT64, None),
    ("test.i64", -(2**63), V.INT64, None),
    ("test.f32", 0.1, V.FLOAT32, None),
    ("test.f32_tiny", 1e-40, V.FLOAT32, None),  # an fp32 subnormal
    ("test.f64", math.pi, V.FLOAT64, None),
    ("test.bool_true", True, V.BOOL, None),
    ("test.bool_false", False, V.BOOL, None),
    ("test.string", "h\u00e9llo w\u00f6rld \u2713 \u4e2d\u6587 \U0001F600 \"quoted\"\n", V.STRING,
     None),
    ("test.empty_string", "", V.STRING, None),
    ("test.arr_u8", [0, 1, 255], V.ARRAY, V.UINT8),
    ("test.arr_i8", [-128, 0, 127], V.ARRAY, V.INT8),
    ("test.arr_u16", [0, 65535], V.ARRAY, V.UINT16),
    ("test.arr_i16", [-32768, 32767], V.ARRAY, V.INT16),
    ("test.arr_u32", [0, 7, 4294967295], V.ARRAY, V.UINT32),
    ("test.arr_i32", [-5, 0, 2147483647], V.ARRAY, V.INT32),
    ("test.arr_u64", [0, 2**64 - 1], V.ARRAY, V.UINT64),
    ("test.arr_i64", [-(2**63), 2**63 - 1], V.ARRAY, V.INT64),
    ("test.arr_f32", [0.1, -2.5, 1e-30, 3.4e38], V.ARRAY, V.FLOAT32),
    ("test.arr_f64", [0.1, -1e300, 5e-324], V.ARRAY, V.FLOAT64),
    ("test.arr_bool", [True, False, True], V.ARRAY, V.BOOL),
    ("test.arr_string", ["a", "", "\u00fc\u00df", "tab\tnewline\n"], V.ARRAY, V.STRING),
    # Arrays of arrays: the writer takes each inner array's element type from its first element
    # (int -> int32, float -> float32, str -> string).
    ("test.nested", [[1, 2, 3], [4], ["x", "yz"], [0.5, -0.25]], V.ARRAY, V.ARRAY),
    ("test.nested3", [[[1], [2, 3]], [["deep"]]], V.ARRAY, V.ARRAY),
]

TYPE_NAMES = {
    V.UINT8: "uint8", V.INT8: "int8", V.UINT16: "uint16", V.INT16: "int16", V.UINT32: "uint32",
    V.INT32: "int32", V.FLOAT32: "float32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array",
    V.UINT64: "uint64", V.INT64: "int64", V.FLOAT64: "float64",
}


def expected_scalar(value, vtype):
    if vtype == V.FLOAT32:
        return float(np.float32(value))
    if vtype == V.FLOAT64:
        return float(value)
    if vtype == V.BOOL:
        return bool(value)
    if vtype == V.STRING:
        return value
    return int(value)


def expected_elements(values, element_type):
    """An array's elements as gguf_dump prints them."""
    out = []
    for x in values:
        if element_type == V.ARRAY:
            inner = V.get_type(x[0])
            out.append({"element_type": TYPE_NAMES[inner], "value": expected_elements(x, inner)})
        else:
            out.append(expected_scalar(x, element_type))
    return out


def expected_entry(key, value, vtype, sub_type):
    entry = {"key": key, "type": TYPE_NAMES[vtype]}
    if vtype == V.ARRAY:
        entry["element_type"] = TYPE_NAMES[sub_type]
        entry["value"] = expected_elements(value, sub_type)
    else:
        entry["value"] = expected_scalar(value, vtype)
    return entry


# ---------------------------------------------------------------------------------------------
# Tensors. Each is (name, ggml type, array handed to GGUFWriter.add_tensor, reference fp32).
BLOCK_TYPES = [  # (type, byte offsets of the block's f16 scale fields)
    (Q.Q4_0, [0]), (Q.Q4_1, [0, 2]), (Q.Q5_0, [0]), (Q.Q5_1, [0, 2]), (Q.Q8_0, [0]),
    (Q.Q2_K, [80, 82]), (Q.Q3_K, [108]), (Q.Q4_K, [0, 2]), (Q.Q5_K, [0, 2]), (Q.Q6_K, [208]),
]
QUANTIZABLE = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.BF16]


def f16_scales(rng, n):
    """n f16 scales: random in [-1, 1], with zero, negative zero and subnormals among them."""
    h = rng.uniform(-1.0, 1.0, size=n).astype(np.float16)
    specials = np.array([0.0, -0.0, 6e-8, -3e-5, 1.0, -1.0], dtype=np.float16)
    k = min(n, len(specials))
    h[:k] = specials[:k]
    return h


def raw_blocks(rng, qtype, f16_offsets, shape):
    """Random bytes for `shape` (elements; the last a multiple of the block) of `qtype`, its f16
    fields overwritten with sane scales. Returned as uint8 of shape (..., bytes per row)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = int(np.prod(shape)) // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in f16_offsets:
        raw[:, off:off + 2] = f16_scales(rng, n_blocks).view(np.uint8).reshape(-1, 2)
    return raw.reshape(*shape[:-1], shape[-1] // block * size)


def make_tensors(rng):
    tensors = []
    for qtype, offsets in BLOCK_TYPES:
        block = gguf.GGML_QUANT_SIZES[qtype][0]
        per_row = 3 if block == 32 else 2
        for suffix, shape in (("rows", (4, per_row * block)),
                              ("3d", (2, 3, block * 2)),
                              ("1d", (block * per_row,))):
            raw = raw_blocks(rng, qtype, offsets, shape)
            tensors.append((f"raw.{qtype.name}.{suffix}", qtype, raw, dequantize(raw, qtype)))
    # A 4-dimensional one.
    raw = raw_blocks(rng, Q.Q8_0, [0], (2, 1, 3, 64))
    tensors.append(("raw.Q8_0.4d", Q.Q8_0, raw, dequantize(raw, Q.Q8_0)))

    for qtype in QUANTIZABLE:
        data = (rng.standard_normal((5, 128)) * 3).astype(np.float32)
        q = quantize(data, qtype)
        assert q.dtype == np.uint8, (qtype, q.dtype)
        tensors.append((f"quantized.{qtype.name}", qtype, q, dequantize(q, qtype)))

    # Plain float types, with infinities, signed zeros, subnormals and NaNs (compared as bits).
    f32 = rng.standard_normal((3, 7)).astype(np.float32)
    f32.flat[:6] = [np.inf, -np.inf, -0.0, 1e-45, np.nan, 3.4e38]
    tensors.append(("plain.F32", Q.F32, f32, f32.copy()))
    f16 = rng.uniform(-65000, 65000, size=(4, 5)).astype(np.float16)
    f16.flat[:6] = np.array([np.inf, -0.0, 6e-8, np.nan, -65504, 1e-5], dtype=np.float16)
    tensors.append(("plain.F16", Q.F16, f16, dequantize(f16, Q.F16)))
    bf16_bits = (rng.standard_normal((2, 9)).astype(np.float32).view(np.uint32) >> 16)
    bf16_bits = bf16_bits.astype(np.uint16)
    bf16_bits.flat[:5] = [0x7F80, 0x8000, 0x0001, 0x7FC1, 0xFF80]  # inf, -0, subnormal, NaN, -inf
    bf16 = bf16_bits.view(np.uint8).reshape(2, 18)
    tensors.append(("plain.BF16", Q.BF16, bf16, dequantize(bf16, Q.BF16)))
    return tensors


def write_gguf(path, tensors, metadata, alignment=None):
    w = gguf.GGUFWriter(path, "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, value, vtype, sub_type in metadata:
        w.add_key_value(key, value, vtype, sub_type)
    for name, qtype, array, _ in tensors:
        if array.dtype == np.uint8:
            w.add_tensor(name, array, raw_dtype=qtype)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_dump(binary, path, out_dir=None, only=None):
    cmd = [binary, path]
    if out_dir is not None:
        cmd.append(out_dir)
    if only:
        cmd += ["--only", ",".join(only)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def bits(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return a.view(np.uint32)


def compare_floats(what, ours, ref):
    if ours.shape != ref.shape:
        fail(f"{what}: shape {ours.shape}, expected {ref.shape}")
        return
    if np.array_equal(bits(ours), bits(ref)):
        return
    diff = np.flatnonzero(bits(ours).ravel() != bits(ref).ravel())
    i = diff[0]
    fail(f"{what}: {diff.size} of {ours.size} values differ; first at flat index {i}: "
         f"{ours.ravel()[i]!r} vs {ref.ravel()[i]!r}")


def check_tensors(doc, tensors, out_dir, label):
    infos = doc["tensors"]
    if [t["name"] for t in infos] != [t[0] for t in tensors]:
        fail(f"{label}: tensor names {[t['name'] for t in infos]}")
        return
    for info, (name, qtype, array, ref) in zip(infos, tensors):
        what = f"{label}: tensor {name} ({qtype.name})"
        if info["type"] != qtype.name:
            fail(f"{what}: type {info['type']}")
        if list(reversed(info["ne"])) != list(ref.shape):
            fail(f"{what}: ne {info['ne']}, expected reversed {list(ref.shape)}")
        if info["num_bytes"] != array.nbytes:
            fail(f"{what}: num_bytes {info['num_bytes']}, expected {array.nbytes}")
        if info["offset"] % doc["alignment"] != 0:
            fail(f"{what}: offset {info['offset']} not aligned to {doc['alignment']}")
        ours = np.fromfile(os.path.join(out_dir, info["file"]), dtype="<f4")
        compare_floats(what, ours.reshape(tuple(reversed(info["ne"]))), ref)


def check_metadata(doc, metadata, label):
    expected = [{"key": "general.architecture", "type": "string", "value": "llama"}]
    expected += [expected_entry(*m) for m in metadata]
    got = doc["metadata"]
    if [m["key"] for m in got] != [m["key"] for m in expected]:
        fail(f"{label}: keys {[m['key'] for m in got]}")
        return
    for g, e in zip(got, expected):
        if g != e:
            fail(f"{label}: metadata {e['key']}: got {g!r}, expected {e!r}")


def synthetic(binary, tmp):
    rng = np.random.default_rng(20261128)
    tensors = make_tensors(rng)
    path = os.path.join(tmp, "all_types.gguf")
    write_gguf(path, tensors, METADATA)
    out3 = os.path.join(tmp, "v3")
    os.mkdir(out3)
    doc = run_dump(binary, path, out3)
    if doc["version"] != 3 or doc["alignment"] != 32:
        fail(f"version {doc['version']} alignment {doc['alignment']}, expected 3 and 32")
    check_metadata(doc, METADATA, "v3")
    check_tensors(doc, tensors, out3, "v3")
    print(f"v3 file: {len(METADATA) + 1} keys, {len(tensors)} tensors checked")

    # Version 2 has the same layout: patch the version field only.
    with open(path, "rb") as f:
        image = f.read()
    path2 = os.path.join(tmp, "all_types_v2.gguf")
    with open(path2, "wb") as f:
        f.write(image[:4] + struct.pack("<I", 2) + image[8:])
    out2 = os.path.join(tmp, "v2")
    os.mkdir(out2)
    doc2 = run_dump(binary, path2, out2)
    if doc2["version"] != 2:
        fail(f"patched file reads as version {doc2['version']}")
    doc2["version"] = 3
    if doc2 != doc:
        fail("the version-2 file's metadata or tensor infos differ from the version-3 file's")
    for info in doc["tensors"]:
        with open(os.path.join(out3, info["file"]), "rb") as a, \
                open(os.path.join(out2, info["file"]), "rb") as b:
            if a.read() != b.read():
                fail(f"v2: tensor {info['name']} dequantizes differently")
    print("v2 file: reads the same")

    # A custom alignment (64), and the smallest one (1: no padding at all).
    for alignment in (64, 1):
        subset = tensors[::3]
        path_a = os.path.join(tmp, f"align{alignment}.gguf")
        write_gguf(path_a, subset, METADATA[:3], alignment=alignment)
        out_a = os.path.join(tmp, f"align{alignment}")
        os.mkdir(out_a)
        doc_a = run_dump(binary, path_a, out_a)
        if doc_a["alignment"] != alignment:
            fail(f"alignment {doc_a['alignment']}, expected {alignment}")
        meta = [("general.alignment", alignment, V.UINT32, None)] + METADATA[:3]
        check_metadata(doc_a, meta, f"align{alignment}")
        check_tensors(doc_a, subset, out_a, f"align{alignment}")
        print(f"alignment {alignment}: {len(subset)} tensors checked")


def reader_value(field):
    """A GGUFReader field as gguf_dump prints its value (scalars and arrays of scalars)."""
    main = field.types[0]
    if main == V.ARRAY:
        sub = field.types[-1]
        return [expected_scalar(x, sub) for x in field.contents()]
    return expected_scalar(field.contents(), main)


def real_model(binary, model, tmp):
    reader = gguf.GGUFReader(model)
    by_name = {t.name: t for t in reader.tensors}
    f32 = next(t.name for t in reader.tensors if t.tensor_type == Q.F32)
    q41 = next(t.name for t in reader.tensors if t.tensor_type == Q.Q4_1)
    chosen = ["token_embd.weight", q41, f32]
    out = os.path.join(tmp, "real")
    os.mkdir(out)
    doc = run_dump(binary, model, out, only=chosen)

    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    if [m["key"] for m in doc["metadata"]] != [f.name for f in fields]:
        fail("real model: metadata keys differ from GGUFReader's")
    for m, f in zip(doc["metadata"], fields):
        if m["type"] != TYPE_NAMES[f.types[0]]:
            fail(f"real model: {f.name} has type {m['type']}, GGUFReader says {f.types[0].name}")
        elif m["value"] != reader_value(f):
            fail(f"real model: {f.name} differs from GGUFReader's value")
    if [t["name"] for t in doc["tensors"]] != [t.name for t in reader.tensors]:
        fail("real model: tensor names differ from GGUFReader's")
    for info in doc["tensors"]:
        t = by_name[info["name"]]
        if (info["type"] != t.tensor_type.name or info["ne"] != [int(x) for x in t.shape]
                or info["num_bytes"] != t.n_bytes):
            fail(f"real model: tensor {t.name}: {info} vs GGUFReader's {t.tensor_type.name} "
                 f"{list(t.shape)} {t.n_bytes} bytes")
    for info in doc["tensors"]:
        if info["name"] not in chosen:
            continue
        t = by_name[info["name"]]
        ref = dequantize(t.data, t.tensor_type).reshape(tuple(reversed(info["ne"])))
        ours = np.fromfile(os.path.join(out, info["file"]), dtype="<f4")
        compare_floats(f"real model: {t.name} ({t.tensor_type.name})",
                       ours.reshape(ref.shape), ref)
    print(f"real model: {len(fields)} keys, {len(doc['tensors'])} tensor infos, "
          f"tensors {', '.join(chosen)} checked")


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    binary = sys.argv[1]
    print(f"gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="gguf_oracle_") as tmp:
        synthetic(binary, tmp)
        model = sys.argv[2] if len(sys.argv) == 3 else None
        if model is None:
            print("NOTE: no real model given: real-model checks not run")
        elif os.path.isfile(model):
            real_model(binary, model, tmp)
        else:
            # CI's set-up fetches it (cluster/install-deps.sh --test); a missing file is a failure,
            # as in the other real-model tests, not a silent pass.
            FAILURES.append(f"{model} is missing (cluster/fetch-smollm2.sh fetches it)")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
