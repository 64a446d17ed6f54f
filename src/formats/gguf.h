// GGUF (the file format of llama.cpp, Ollama and ggml): a streamed, atomic writer and a
// validating reader, version 3 (the reader also takes version 2, which has the same layout).
//
// Layout, every number little-endian (ggml-org/llama.cpp gguf-py/gguf/gguf_writer.py):
//   "GGUF"  u32 version  u64 tensor_count  u64 kv_count
//   kv_count × { string key, u32 value_type, value }
//       string = u64 byte length + UTF-8 bytes (no terminator)
//       value  = a scalar | a string | an array { u32 element_type, u64 count, count × element }
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//       ne[0] is the innermost (contiguous) dimension: a PyTorch (rows, cols) matrix is
//       ne = {cols, rows}; offset is relative to the data section and a multiple of alignment
//   zero padding to `alignment` (the u32 key general.alignment, default 32), then the data
//   section: each tensor's bytes at data_start + offset, each padded to the alignment.
//
// The writer lays the tensors out back to back in the given order (what ggml's loader
// requires) and asks a fill callback for each tensor's bytes when it gets there, so memory
// holds one tensor at a time. The reader checks everything before a byte of data is used:
// magic, version, every length against the file size, value types, keys and names unique,
// dimensions and types known, alignment, offsets aligned, in range and not overlapping.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gk {

constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr int kGgufMaxDims = 4;        // GGML_MAX_DIMS
constexpr size_t kGgufMaxNameBytes = 63;  // GGML_MAX_NAME - 1 (ggml rejects longer tensor names)

// Metadata value types (gguf-py GGUFValueType).
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType t);  // "u32", "string", ...; "?" when unknown

// Tensor element types (ggml.h ggml_type, gguf-py GGMLQuantizationType); the ones the
// exporter writes are named, the reader knows the block sizes of every type in gguf-py.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBF16 = 30 };

struct GgmlTypeInfo {
  std::string_view name;  // "F32", "Q8_0", ...
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
};
const GgmlTypeInfo* FindGgmlType(uint32_t type);  // nullptr for an unknown type
// Bytes of a tensor; errors on an unknown type, a negative dimension, ne[0] not a whole
// number of blocks, or overflow. `what` names the tensor in the message.
Result<uint64_t> GgmlTensorBytes(uint32_t type, const std::vector<int64_t>& ne, const std::string& what);

// One metadata value: a scalar, a string, or an array of scalars or strings. Numbers are
// stored as their little-endian bytes, so a 262144-entry score array is one 1 MiB buffer.
class GgufValue {
 public:
  GgufValue() = default;
  static GgufValue U8(uint8_t v) { return Scalar(GgufValueType::kU8, &v, 1); }
  static GgufValue I8(int8_t v) { return Scalar(GgufValueType::kI8, &v, 1); }
  static GgufValue U16(uint16_t v) { return Scalar(GgufValueType::kU16, &v, 2); }
  static GgufValue I16(int16_t v) { return Scalar(GgufValueType::kI16, &v, 2); }
  static GgufValue U32(uint32_t v) { return Scalar(GgufValueType::kU32, &v, 4); }
  static GgufValue I32(int32_t v) { return Scalar(GgufValueType::kI32, &v, 4); }
  static GgufValue F32(float v) { return Scalar(GgufValueType::kF32, &v, 4); }
  static GgufValue U64(uint64_t v) { return Scalar(GgufValueType::kU64, &v, 8); }
  static GgufValue I64(int64_t v) { return Scalar(GgufValueType::kI64, &v, 8); }
  static GgufValue F64(double v) { return Scalar(GgufValueType::kF64, &v, 8); }
  static GgufValue Bool(bool v) {
    const uint8_t b = v ? 1 : 0;
    return Scalar(GgufValueType::kBool, &b, 1);
  }
  static GgufValue String(std::string v);
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue I32Array(const std::vector<int32_t>& v) { return NumArray(GgufValueType::kI32, v.data(), v.size(), 4); }
  static GgufValue U32Array(const std::vector<uint32_t>& v) { return NumArray(GgufValueType::kU32, v.data(), v.size(), 4); }
  static GgufValue F32Array(const std::vector<float>& v) { return NumArray(GgufValueType::kF32, v.data(), v.size(), 4); }
  static GgufValue BoolArray(const std::vector<bool>& v);
  // An array of fixed-size elements given as packed little-endian bytes (the reader's form).
  static Result<GgufValue> RawArray(GgufValueType elem, uint64_t count, std::vector<uint8_t> bytes);

  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::kArray; }
  GgufValueType elem_type() const { return elem_; }  // arrays: the element type
  uint64_t size() const { return count_; }           // arrays: the element count

  // Scalars (false / nullptr when the value is not of that kind): any integer type reads as
  // int64 (a u64 above INT64_MAX does not), f32/f64 as double, bool only as bool.
  bool GetInt(int64_t* out) const;
  bool GetFloat(double* out) const;
  bool GetBool(bool* out) const;
  const std::string* GetString() const { return type_ == GgufValueType::kString ? &str_ : nullptr; }
  // Arrays.
  const std::vector<std::string>* GetStrings() const {
    return (is_array() && elem_ == GgufValueType::kString) ? &strings_ : nullptr;
  }
  // Element i of a numeric or bool array as double / int64 (0 when out of range or a string).
  double NumberAt(uint64_t i) const;
  int64_t IntAt(uint64_t i) const;
  const std::vector<uint8_t>& raw() const { return raw_; }  // packed scalar / array payload

  // Value as text for messages and dumps: numbers, "quoted" strings, arrays cut at max_items.
  std::string ToString(size_t max_items = 8) const;

 private:
  static GgufValue Scalar(GgufValueType t, const void* bytes, size_t n);
  static GgufValue NumArray(GgufValueType elem, const void* data, size_t count, size_t elem_size);
  static double DecodeNumber(GgufValueType t, const uint8_t* p);
  static int64_t DecodeInt(GgufValueType t, const uint8_t* p);

  GgufValueType type_ = GgufValueType::kU8;
  GgufValueType elem_ = GgufValueType::kU8;
  uint64_t count_ = 0;
  std::vector<uint8_t> raw_;  // scalar bytes, or count_ packed elements
  std::string str_;
  std::vector<std::string> strings_;
};

// Size in bytes of one element of a fixed-size type; 0 for string, array and unknown types.
size_t GgufScalarSize(GgufValueType t);

struct GgufKv {
  std::string key;
  GgufValue value;
};

// A tensor to write. fill is called once, in order, with exactly the tensor's byte size.
struct GgufTensorSpec {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // innermost first (see the layout above)
  std::function<Status(uint8_t* dst, size_t nbytes)> fill;
};

// Writes path atomically (a temporary file renamed over it once complete). The alignment is
// general.alignment when kvs has it (it must be a u32 power of two), else 32. Rejects
// duplicate keys or tensor names, names over 63 bytes, 0 or more than 4 dimensions, negative
// dimensions, and rows that are not whole blocks of the type.
Status WriteGguf(const std::string& path, const std::vector<GgufKv>& kvs, const std::vector<GgufTensorSpec>& tensors);

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0;         // ggml_type
  std::vector<int64_t> ne;   // innermost first
  uint64_t offset = 0;       // relative to the data section
  uint64_t file_offset = 0;  // absolute
  uint64_t nbytes = 0;
  int64_t numel() const;
};

// A validated GGUF file: its metadata and tensor directory in memory, the data read on demand.
class GgufFile {
 public:
  static Result<GgufFile> Open(const std::string& path);
  GgufFile(GgufFile&& o) noexcept;
  GgufFile& operator=(GgufFile&&) = delete;
  GgufFile(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }
  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const GgufValue* Find(std::string_view key) const;  // nullptr when absent
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // Whether the tensors lie back to back in directory order, each padded to the alignment:
  // what ggml's loader (gguf_init_from_file) insists on. Open() only requires no overlap.
  bool Contiguous() const;
  // Copies a tensor's nbytes bytes into dst.
  Status ReadTensor(const GgufTensorInfo& t, void* dst) const;

 private:
  GgufFile() = default;
  static Result<GgufFile> OpenUnguarded(const std::string& path);  // Open without GuardedParse
  std::string path_;
  int fd_ = -1;
  uint32_t version_ = 0, alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0, file_size_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensorInfo> tensors_;
};

// Q8_0 as ggml's quantize_row_q8_0_ref and gguf-py's quants.Q8_0 (bit-exact with both): per
// block of 32, d = max|x| / 127 in f32, q = roundf(x / d) (half away from zero), stored as
// f16(d) then the 32 int8 codes: 34 bytes. n must be a multiple of 32.
void QuantizeQ8_0(const float* x, int64_t n, uint8_t* dst);
// n elements of F32, F16, BF16 or Q8_0 data as float; other types are an error.
Status DequantizeGgml(uint32_t type, const uint8_t* src, int64_t n, float* dst);

}  // namespace gk
