#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>
#include <utility>

#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};

std::string Errno() { return std::strerror(errno); }

std::string NeStr(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += StrCat(i ? ", " : "", ne[i]);
  return s + "]";
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Block size and bytes per block of every type gguf-py knows (constants.py GGML_QUANT_SIZES).
struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};
constexpr int64_t kQK = 256;  // QK_K
const TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},
    {1, {"F16", 1, 2}},
    {2, {"Q4_0", 32, 2 + 16}},
    {3, {"Q4_1", 32, 2 + 2 + 16}},
    {6, {"Q5_0", 32, 2 + 4 + 16}},
    {7, {"Q5_1", 32, 2 + 2 + 4 + 16}},
    {8, {"Q8_0", 32, 2 + 32}},
    {9, {"Q8_1", 32, 4 + 4 + 32}},
    {10, {"Q2_K", kQK, 2 + 2 + kQK / 16 + kQK / 4}},
    {11, {"Q3_K", kQK, 2 + kQK / 4 + kQK / 8 + 12}},
    {12, {"Q4_K", kQK, 2 + 2 + kQK / 2 + 12}},
    {13, {"Q5_K", kQK, 2 + 2 + kQK / 2 + kQK / 8 + 12}},
    {14, {"Q6_K", kQK, 2 + kQK / 2 + kQK / 4 + kQK / 16}},
    {15, {"Q8_K", kQK, 4 + kQK + kQK / 8}},
    {16, {"IQ2_XXS", kQK, 2 + kQK / 4}},
    {17, {"IQ2_XS", kQK, 2 + kQK / 4 + kQK / 32}},
    {18, {"IQ3_XXS", kQK, 2 + kQK / 4 + kQK / 8}},
    {19, {"IQ1_S", kQK, 2 + kQK / 8 + kQK / 16}},
    {20, {"IQ4_NL", 32, 2 + 16}},
    {21, {"IQ3_S", kQK, 2 + kQK / 4 + kQK / 8 + kQK / 32 + 4}},
    {22, {"IQ2_S", kQK, 2 + kQK / 4 + kQK / 16}},
    {23, {"IQ4_XS", kQK, 2 + 2 + kQK / 2 + kQK / 64}},
    {24, {"I8", 1, 1}},
    {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},
    {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},
    {29, {"IQ1_M", kQK, kQK / 8 + kQK / 16 + kQK / 32}},
    {30, {"BF16", 1, 2}},
    {34, {"TQ1_0", kQK, 2 + 4 * 13}},
    {35, {"TQ2_0", kQK, 2 + 64}},
    {39, {"MXFP4", 32, 1 + 16}},
    {40, {"NVFP4", 64, 4 + 32}},
    {41, {"Q1_0", 128, 2 + 16}},
};

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void PutString(std::string* out, std::string_view s) {
  PutU64(out, s.size());
  out->append(s.data(), s.size());
}

void PutValue(std::string* out, const GgufValue& v) {
  PutU32(out, uint32_t(v.type()));
  if (v.type() == GgufValueType::kString) {
    PutString(out, *v.GetString());
  } else if (v.is_array()) {
    PutU32(out, uint32_t(v.elem_type()));
    PutU64(out, v.size());
    if (const auto* strs = v.GetStrings()) {
      for (const std::string& s : *strs) PutString(out, s);
    } else {
      out->append(reinterpret_cast<const char*>(v.raw().data()), v.raw().size());
    }
  } else {
    out->append(reinterpret_cast<const char*>(v.raw().data()), v.raw().size());
  }
}

// Buffered sequential reads of the header region, each checked against the file size.
class Cursor {
 public:
  Cursor(int fd, uint64_t file_size, const std::string& path) : fd_(fd), size_(file_size), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Status Read(void* dst, uint64_t n, const std::string& what) {
    if (n > remaining()) {
      return Status::Error(StrCat(path_, ": truncated: ", what, " at offset ", pos_, " needs ", n,
                                  " bytes but the file ends at ", size_));
    }
    auto* d = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) GK_RETURN_IF_ERROR(Fill());
      const uint64_t off = pos_ - buf_start_;
      const uint64_t take = std::min<uint64_t>(n, buf_.size() - off);
      std::memcpy(d, buf_.data() + off, take);
      d += take;
      n -= take;
      pos_ += take;
    }
    return Status::Ok();
  }
  Result<uint32_t> U32(const std::string& what) {
    uint32_t v;
    GK_RETURN_IF_ERROR(Read(&v, 4, what));
    return v;
  }
  Result<uint64_t> U64(const std::string& what) {
    uint64_t v;
    GK_RETURN_IF_ERROR(Read(&v, 8, what));
    return v;
  }
  Result<std::string> String(const std::string& what) {
    GK_ASSIGN_OR_RETURN(uint64_t n, U64(what + " length"));
    if (n > remaining()) {
      return Result<std::string>::Error(StrCat(path_, ": truncated: ", what, " at offset ", pos_ - 8, " claims ", n,
                                               " bytes but only ", remaining(), " remain in the file"));
    }
    std::string s(n, '\0');
    GK_RETURN_IF_ERROR(Read(s.data(), n, what));
    return s;
  }

 private:
  Status Fill() {
    constexpr uint64_t kChunk = 1 << 20;
    const uint64_t n = std::min<uint64_t>(kChunk, size_ - pos_);
    buf_.resize(n);
    uint64_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd_, buf_.data() + got, n - got, off_t(pos_ + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return Status::Error(StrCat(path_, ": read at offset ", pos_ + got, " failed: ", r < 0 ? Errno() : "end of file"));
      got += uint64_t(r);
    }
    buf_start_ = pos_;
    return Status::Ok();
  }

  int fd_;
  uint64_t size_;
  const std::string& path_;
  uint64_t pos_ = 0;
  uint64_t buf_start_ = 0;
  std::vector<uint8_t> buf_;
};

Result<GgufValue> ReadValue(Cursor& c, GgufValueType type, const std::string& key, const std::string& path) {
  const std::string what = StrCat("value of ", key);
  if (type == GgufValueType::kString) {
    GK_ASSIGN_OR_RETURN(std::string s, c.String(what));
    return GgufValue::String(std::move(s));
  }
  if (type == GgufValueType::kArray) {
    GK_ASSIGN_OR_RETURN(uint32_t et, c.U32(what + " element type"));
    GK_ASSIGN_OR_RETURN(uint64_t count, c.U64(what + " element count"));
    const auto elem = GgufValueType(et);
    if (elem == GgufValueType::kArray) {
      return Result<GgufValue>::Error(StrCat(path, ": key ", key, " is an array of arrays, which ggml does not support"));
    }
    if (elem == GgufValueType::kString) {
      if (count > c.remaining() / 8) {
        return Result<GgufValue>::Error(StrCat(path, ": truncated: key ", key, " claims ", count,
                                               " strings but only ", c.remaining(), " bytes remain"));
      }
      std::vector<std::string> v;
      v.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        GK_ASSIGN_OR_RETURN(std::string s, c.String(StrCat(what, "[", i, "]")));
        v.push_back(std::move(s));
      }
      return GgufValue::StringArray(std::move(v));
    }
    const size_t es = GgufScalarSize(elem);
    if (es == 0) {
      return Result<GgufValue>::Error(StrCat(path, ": key ", key, " has an array of unknown element type ", et));
    }
    if (count > c.remaining() / es) {
      return Result<GgufValue>::Error(StrCat(path, ": truncated: key ", key, " claims ", count, " elements of ",
                                             es, " bytes but only ", c.remaining(), " bytes remain"));
    }
    std::vector<uint8_t> bytes(count * es);
    GK_RETURN_IF_ERROR(c.Read(bytes.data(), bytes.size(), what));
    return GgufValue::RawArray(elem, count, std::move(bytes));
  }
  const size_t n = GgufScalarSize(type);
  if (n == 0) {
    return Result<GgufValue>::Error(StrCat(path, ": key ", key, " has unknown value type ", uint32_t(type)));
  }
  uint8_t b[8] = {};
  GK_RETURN_IF_ERROR(c.Read(b, n, what));
  switch (type) {
    case GgufValueType::kU8: { uint8_t x; std::memcpy(&x, b, 1); return GgufValue::U8(x); }
    case GgufValueType::kI8: { int8_t x; std::memcpy(&x, b, 1); return GgufValue::I8(x); }
    case GgufValueType::kU16: { uint16_t x; std::memcpy(&x, b, 2); return GgufValue::U16(x); }
    case GgufValueType::kI16: { int16_t x; std::memcpy(&x, b, 2); return GgufValue::I16(x); }
    case GgufValueType::kU32: { uint32_t x; std::memcpy(&x, b, 4); return GgufValue::U32(x); }
    case GgufValueType::kI32: { int32_t x; std::memcpy(&x, b, 4); return GgufValue::I32(x); }
    case GgufValueType::kF32: { float x; std::memcpy(&x, b, 4); return GgufValue::F32(x); }
    case GgufValueType::kU64: { uint64_t x; std::memcpy(&x, b, 8); return GgufValue::U64(x); }
    case GgufValueType::kI64: { int64_t x; std::memcpy(&x, b, 8); return GgufValue::I64(x); }
    case GgufValueType::kF64: { double x; std::memcpy(&x, b, 8); return GgufValue::F64(x); }
    case GgufValueType::kBool:
      if (b[0] > 1) return Result<GgufValue>::Error(StrCat(path, ": key ", key, " is a bool with byte value ", int(b[0])));
      return GgufValue::Bool(b[0] != 0);
    default: break;
  }
  return Result<GgufValue>::Error(StrCat(path, ": key ", key, " has unknown value type ", uint32_t(type)));
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: return "u8";
    case GgufValueType::kI8: return "i8";
    case GgufValueType::kU16: return "u16";
    case GgufValueType::kI16: return "i16";
    case GgufValueType::kU32: return "u32";
    case GgufValueType::kI32: return "i32";
    case GgufValueType::kF32: return "f32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "u64";
    case GgufValueType::kI64: return "i64";
    case GgufValueType::kF64: return "f64";
  }
  return "?";
}

size_t GgufScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    default: return 0;
  }
}

const GgmlTypeInfo* FindGgmlType(uint32_t type) {
  for (const TypeRow& r : kTypes) {
    if (r.id == type) return &r.info;
  }
  return nullptr;
}

Result<uint64_t> GgmlTensorBytes(uint32_t type, const std::vector<int64_t>& ne, const std::string& what) {
  const GgmlTypeInfo* info = FindGgmlType(type);
  if (!info) return Result<uint64_t>::Error(StrCat(what, " has unknown ggml type ", type));
  if (ne.empty()) return Result<uint64_t>::Error(StrCat(what, " has no dimensions"));
  for (int64_t d : ne) {
    if (d < 0) return Result<uint64_t>::Error(StrCat(what, " has negative dimension ", d, " in ", NeStr(ne)));
  }
  if (ne[0] % info->block_size != 0) {
    return Result<uint64_t>::Error(StrCat(what, " has ne[0] = ", ne[0], ", not a multiple of the ", info->name,
                                          " block size ", info->block_size));
  }
  uint64_t bytes = uint64_t(info->type_size);
  for (size_t i = 0; i < ne.size(); ++i) {
    if (__builtin_mul_overflow(bytes, uint64_t(i == 0 ? ne[0] / info->block_size : ne[i]), &bytes)) {
      return Result<uint64_t>::Error(StrCat(what, " shape ", NeStr(ne), " is too large (byte size overflows 64 bits)"));
    }
  }
  return bytes;
}

// ---- GgufValue ----

GgufValue GgufValue::Scalar(GgufValueType t, const void* bytes, size_t n) {
  GgufValue v;
  v.type_ = t;
  v.raw_.assign(static_cast<const uint8_t*>(bytes), static_cast<const uint8_t*>(bytes) + n);
  return v;
}

GgufValue GgufValue::NumArray(GgufValueType elem, const void* data, size_t count, size_t elem_size) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.elem_ = elem;
  v.count_ = count;
  v.raw_.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + count * elem_size);
  return v;
}

GgufValue GgufValue::String(std::string s) {
  GgufValue v;
  v.type_ = GgufValueType::kString;
  v.str_ = std::move(s);
  return v;
}

GgufValue GgufValue::StringArray(std::vector<std::string> s) {
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.elem_ = GgufValueType::kString;
  v.count_ = s.size();
  v.strings_ = std::move(s);
  return v;
}

GgufValue GgufValue::BoolArray(const std::vector<bool>& b) {
  std::vector<uint8_t> bytes(b.size());
  for (size_t i = 0; i < b.size(); ++i) bytes[i] = b[i] ? 1 : 0;
  return NumArray(GgufValueType::kBool, bytes.data(), bytes.size(), 1);
}

Result<GgufValue> GgufValue::RawArray(GgufValueType elem, uint64_t count, std::vector<uint8_t> bytes) {
  const size_t es = GgufScalarSize(elem);
  if (es == 0) return Result<GgufValue>::Error(StrCat("array element type ", GgufValueTypeName(elem), " is not a fixed-size type"));
  if (bytes.size() != count * es) {
    return Result<GgufValue>::Error(StrCat("array of ", count, " ", GgufValueTypeName(elem), " needs ", count * es,
                                           " bytes, got ", bytes.size()));
  }
  GgufValue v;
  v.type_ = GgufValueType::kArray;
  v.elem_ = elem;
  v.count_ = count;
  v.raw_ = std::move(bytes);
  return v;
}

int64_t GgufValue::DecodeInt(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kBool: return *p;
    case GgufValueType::kI8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case GgufValueType::kU16: { uint16_t x; std::memcpy(&x, p, 2); return x; }
    case GgufValueType::kI16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case GgufValueType::kU32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case GgufValueType::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case GgufValueType::kU64: { uint64_t x; std::memcpy(&x, p, 8); return int64_t(x); }
    case GgufValueType::kI64: { int64_t x; std::memcpy(&x, p, 8); return x; }
    case GgufValueType::kF32: { float x; std::memcpy(&x, p, 4); return int64_t(x); }
    case GgufValueType::kF64: { double x; std::memcpy(&x, p, 8); return int64_t(x); }
    default: return 0;
  }
}

double GgufValue::DecodeNumber(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kF32: { float x; std::memcpy(&x, p, 4); return x; }
    case GgufValueType::kF64: { double x; std::memcpy(&x, p, 8); return x; }
    case GgufValueType::kU64: { uint64_t x; std::memcpy(&x, p, 8); return double(x); }
    default: return double(DecodeInt(t, p));
  }
}

bool GgufValue::GetInt(int64_t* out) const {
  switch (type_) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kU16: case GgufValueType::kI16:
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kI64:
      *out = DecodeInt(type_, raw_.data());
      return true;
    case GgufValueType::kU64: {
      uint64_t x;
      std::memcpy(&x, raw_.data(), 8);
      if (x > uint64_t(INT64_MAX)) return false;
      *out = int64_t(x);
      return true;
    }
    default: return false;
  }
}

bool GgufValue::GetFloat(double* out) const {
  if (type_ != GgufValueType::kF32 && type_ != GgufValueType::kF64) return false;
  *out = DecodeNumber(type_, raw_.data());
  return true;
}

bool GgufValue::GetBool(bool* out) const {
  if (type_ != GgufValueType::kBool) return false;
  *out = raw_[0] != 0;
  return true;
}

double GgufValue::NumberAt(uint64_t i) const {
  const size_t es = GgufScalarSize(elem_);
  if (!is_array() || es == 0 || i >= count_) return 0;
  return DecodeNumber(elem_, raw_.data() + i * es);
}

int64_t GgufValue::IntAt(uint64_t i) const {
  const size_t es = GgufScalarSize(elem_);
  if (!is_array() || es == 0 || i >= count_) return 0;
  return DecodeInt(elem_, raw_.data() + i * es);
}

std::string GgufValue::ToString(size_t max_items) const {
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char ch : s.substr(0, 200)) {
      if (ch == '"' || ch == '\\') q += '\\';
      if (ch == '\n') { q += "\\n"; continue; }
      q += ch;
    }
    return q + (s.size() > 200 ? "...\"" : "\"");
  };
  auto scalar = [&](GgufValueType t, const uint8_t* p) -> std::string {
    if (t == GgufValueType::kBool) return *p ? "true" : "false";
    if (t == GgufValueType::kF32 || t == GgufValueType::kF64) return StrCat(DecodeNumber(t, p));
    if (t == GgufValueType::kU64) { uint64_t x; std::memcpy(&x, p, 8); return StrCat(x); }
    return StrCat(DecodeInt(t, p));
  };
  if (type_ == GgufValueType::kString) return quote(str_);
  if (!is_array()) return scalar(type_, raw_.data());
  std::string s = StrCat("[", GgufValueTypeName(elem_), " x ", count_, ": ");
  for (uint64_t i = 0; i < count_ && i < max_items; ++i) {
    if (i) s += ", ";
    s += elem_ == GgufValueType::kString ? quote(strings_[i]) : scalar(elem_, raw_.data() + i * GgufScalarSize(elem_));
  }
  return s + (count_ > max_items ? ", ...]" : "]");
}

// ---- writer ----

Status WriteGguf(const std::string& path, const std::vector<GgufKv>& kvs, const std::vector<GgufTensorSpec>& tensors) {
  uint32_t alignment = kGgufDefaultAlignment;
  std::set<std::string> keys;
  for (const GgufKv& kv : kvs) {
    if (!keys.insert(kv.key).second) return Status::Error(StrCat(path, ": metadata key ", kv.key, " given twice"));
    if (kv.key == "general.alignment") {
      int64_t a = 0;
      if (kv.value.type() != GgufValueType::kU32 || !kv.value.GetInt(&a) || !IsPowerOfTwo(uint64_t(a))) {
        return Status::Error(StrCat(path, ": general.alignment must be a u32 power of two, got ",
                                    GgufValueTypeName(kv.value.type()), " ", kv.value.ToString()));
      }
      alignment = uint32_t(a);
    }
  }
  std::string head;
  head.append(reinterpret_cast<const char*>(kMagic), 4);
  PutU32(&head, kGgufVersion);
  PutU64(&head, tensors.size());
  PutU64(&head, kvs.size());
  for (const GgufKv& kv : kvs) {
    PutString(&head, kv.key);
    PutValue(&head, kv.value);
  }
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0, max_bytes = 0;
  for (const GgufTensorSpec& t : tensors) {
    const std::string what = StrCat(path, ": tensor ", t.name);
    if (t.name.empty() || t.name.size() > kGgufMaxNameBytes) {
      return Status::Error(StrCat(path, ": tensor name '", t.name, "' must have 1 to ", kGgufMaxNameBytes, " bytes"));
    }
    if (!names.insert(t.name).second) return Status::Error(StrCat(path, ": tensor ", t.name, " given twice"));
    if (t.ne.empty() || t.ne.size() > size_t(kGgufMaxDims)) {
      return Status::Error(StrCat(what, " has ", t.ne.size(), " dimensions; GGUF tensors have 1 to ", kGgufMaxDims));
    }
    GK_ASSIGN_OR_RETURN(uint64_t nbytes, GgmlTensorBytes(uint32_t(t.type), t.ne, what));
    PutString(&head, t.name);
    PutU32(&head, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) PutU64(&head, uint64_t(d));
    PutU32(&head, uint32_t(t.type));
    PutU64(&head, offset);
    sizes.push_back(nbytes);
    offset += AlignUp(nbytes, alignment);
    max_bytes = std::max(max_bytes, nbytes);
  }
  head.resize(AlignUp(head.size(), alignment), '\0');

  GK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  GK_RETURN_IF_ERROR(f.Write(head));
  std::vector<uint8_t> buf;
  buf.reserve(AlignUp(max_bytes, alignment));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t padded = AlignUp(sizes[i], alignment);
    buf.assign(padded, 0);
    if (!tensors[i].fill) return Status::Error(StrCat(path, ": tensor ", tensors[i].name, " has no fill function"));
    GK_RETURN_IF_ERROR(tensors[i].fill(buf.data(), sizes[i]).Wrap(StrCat(path, ": tensor ", tensors[i].name)));
    GK_RETURN_IF_ERROR(f.Write(buf.data(), padded));
  }
  return f.Commit();
}

// ---- reader ----

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufFile::GgufFile(GgufFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), version_(o.version_), alignment_(o.alignment_),
      data_offset_(o.data_offset_), file_size_(o.file_size_), kvs_(std::move(o.kvs_)), tensors_(std::move(o.tensors_)) {
  o.fd_ = -1;
}

GgufFile::~GgufFile() {
  if (fd_ >= 0) ::close(fd_);
}

// The file is outside input: whatever parsing it throws is an error naming it
// (util/guarded_parse.h).
Result<GgufFile> GgufFile::Open(const std::string& path) {
  return GuardedParse(path, [&] { return OpenUnguarded(path); });
}

Result<GgufFile> GgufFile::OpenUnguarded(const std::string& path) {
  using R = Result<GgufFile>;
  GgufFile g;
  g.path_ = path;
  g.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (g.fd_ < 0) return R::Error(StrCat("cannot open ", path, ": ", Errno()));
  struct stat st;
  if (::fstat(g.fd_, &st) != 0) return R::Error(StrCat("cannot stat ", path, ": ", Errno()));
  if (!S_ISREG(st.st_mode)) return R::Error(StrCat(path, " is not a regular file"));
  g.file_size_ = uint64_t(st.st_size);

  Cursor c(g.fd_, g.file_size_, g.path_);
  uint8_t magic[4];
  if (g.file_size_ < 24) {
    if (g.file_size_ >= 4 && ::pread(g.fd_, magic, 4, 0) == 4 && std::memcmp(magic, kMagic, 4) != 0) {
      return R::Error(StrCat(path, ": not a GGUF file (it does not start with \"GGUF\")"));
    }
    return R::Error(StrCat(path, ": truncated: ", g.file_size_, " bytes is shorter than the 24-byte GGUF header"));
  }
  GK_RETURN_IF_ERROR(c.Read(magic, 4, "magic"));
  if (std::memcmp(magic, kMagic, 4) != 0) {
    return R::Error(StrCat(path, ": not a GGUF file (it starts with bytes ", int(magic[0]), " ", int(magic[1]), " ",
                           int(magic[2]), " ", int(magic[3]), ", not \"GGUF\")"));
  }
  GK_ASSIGN_OR_RETURN(g.version_, c.U32("version"));
  if (g.version_ != 2 && g.version_ != 3) {
    if ((g.version_ & 0xffff) == 0) {
      return R::Error(StrCat(path, ": big-endian GGUF files are not supported"));
    }
    return R::Error(StrCat(path, ": unsupported GGUF version ", g.version_, " (gemmakit reads versions 2 and 3)"));
  }
  GK_ASSIGN_OR_RETURN(uint64_t n_tensors, c.U64("tensor count"));
  GK_ASSIGN_OR_RETURN(uint64_t n_kv, c.U64("metadata count"));
  // Each key-value takes at least 13 bytes and each tensor info at least 32: a count beyond
  // what the file can hold is damage, caught before anything is allocated for it.
  if (n_kv > c.remaining() / 13) {
    return R::Error(StrCat(path, ": truncated or damaged: header claims ", n_kv, " metadata entries but only ",
                           c.remaining(), " bytes follow"));
  }
  if (n_tensors > c.remaining() / 32) {
    return R::Error(StrCat(path, ": truncated or damaged: header claims ", n_tensors, " tensors but only ",
                           c.remaining(), " bytes follow"));
  }

  std::unordered_map<std::string, size_t> key_index;
  for (uint64_t i = 0; i < n_kv; ++i) {
    GK_ASSIGN_OR_RETURN(std::string key, c.String(StrCat("key of metadata entry ", i)));
    GK_ASSIGN_OR_RETURN(uint32_t type, c.U32(StrCat("value type of ", key)));
    GK_ASSIGN_OR_RETURN(GgufValue value, ReadValue(c, GgufValueType(type), key, path));
    if (!key_index.emplace(key, g.kvs_.size()).second) {
      return R::Error(StrCat(path, ": metadata key ", key, " appears twice"));
    }
    g.kvs_.push_back({std::move(key), std::move(value)});
  }
  if (const GgufValue* a = g.Find("general.alignment")) {
    int64_t v = 0;
    if (a->type() != GgufValueType::kU32 || !a->GetInt(&v) || !IsPowerOfTwo(uint64_t(v))) {
      return R::Error(StrCat(path, ": general.alignment must be a u32 power of two, got ",
                             GgufValueTypeName(a->type()), " ", a->ToString()));
    }
    g.alignment_ = uint32_t(v);
  }

  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    GK_ASSIGN_OR_RETURN(t.name, c.String(StrCat("name of tensor ", i)));
    const std::string what = StrCat(path, ": tensor ", t.name);
    if (t.name.empty() || t.name.size() > kGgufMaxNameBytes) {
      return R::Error(StrCat(path, ": tensor ", i, " has a name of ", t.name.size(), " bytes (GGUF allows 1 to ",
                             kGgufMaxNameBytes, ")"));
    }
    if (!names.insert(t.name).second) return R::Error(StrCat(path, ": tensor ", t.name, " appears twice"));
    GK_ASSIGN_OR_RETURN(uint32_t n_dims, c.U32(StrCat("dimension count of ", t.name)));
    if (n_dims == 0 || n_dims > uint32_t(kGgufMaxDims)) {
      return R::Error(StrCat(what, " has ", n_dims, " dimensions; GGUF tensors have 1 to ", kGgufMaxDims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      GK_ASSIGN_OR_RETURN(uint64_t v, c.U64(StrCat("dimension ", d, " of ", t.name)));
      if (v > uint64_t(INT64_MAX)) return R::Error(StrCat(what, " has dimension ", d, " = ", v, ", too large"));
      t.ne.push_back(int64_t(v));
    }
    GK_ASSIGN_OR_RETURN(t.type, c.U32(StrCat("type of ", t.name)));
    GK_ASSIGN_OR_RETURN(t.offset, c.U64(StrCat("offset of ", t.name)));
    GK_ASSIGN_OR_RETURN(t.nbytes, GgmlTensorBytes(t.type, t.ne, what));
    g.tensors_.push_back(std::move(t));
  }
  g.data_offset_ = AlignUp(c.pos(), g.alignment_);
  // A file without tensor data may end right after its header (gguf-py writes vocab-only
  // files that way); one with data must reach its padded data section.
  const bool has_data = std::any_of(g.tensors_.begin(), g.tensors_.end(), [](const GgufTensorInfo& t) { return t.nbytes > 0; });
  if (g.data_offset_ > g.file_size_ && has_data) {
    return R::Error(StrCat(path, ": truncated: the data section would start at ", g.data_offset_,
                           " but the file has ", g.file_size_, " bytes"));
  }
  const uint64_t data_size = g.file_size_ > g.data_offset_ ? g.file_size_ - g.data_offset_ : 0;
  for (GgufTensorInfo& t : g.tensors_) {
    if (t.offset % g.alignment_ != 0) {
      return R::Error(StrCat(path, ": tensor ", t.name, " has offset ", t.offset, ", not a multiple of the alignment ",
                             g.alignment_));
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return R::Error(StrCat(path, ": truncated or damaged: tensor ", t.name, " data [", t.offset, ", ",
                             t.offset + t.nbytes, ") runs past the end of the data section (", data_size, " bytes)"));
    }
    t.file_offset = g.data_offset_ + t.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : g.tensors_) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset) {
      return R::Error(StrCat(path, ": tensors ", a.name, " [", a.offset, ", ", a.offset + a.nbytes, ") and ", b.name,
                             " [", b.offset, ", ", b.offset + b.nbytes, ") overlap"));
    }
  }
  return g;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  for (const GgufKv& kv : kvs_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool GgufFile::Contiguous() const {
  uint64_t expect = 0;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset != expect) return false;
    expect += AlignUp(t.nbytes, alignment_);
  }
  return true;
}

Status GgufFile::ReadTensor(const GgufTensorInfo& t, void* dst) const {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t n = t.nbytes, off = t.file_offset;
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return Status::Error(StrCat(path_, ": reading tensor ", t.name, " at offset ", off, " failed: ",
                                  r < 0 ? Errno() : "unexpected end of file"));
    }
    p += r;
    n -= uint64_t(r);
    off += uint64_t(r);
  }
  return Status::Ok();
}

// ---- element formats ----

void QuantizeQ8_0(const float* x, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    uint8_t* out = dst + b * 34;
    const uint16_t d16 = F32ToF16(d);
    std::memcpy(out, &d16, 2);
    for (int i = 0; i < 32; ++i) {
      const int8_t q = int8_t(std::round(v[i] * id));
      std::memcpy(out + 2 + i, &q, 1);
    }
  }
}

Status DequantizeGgml(uint32_t type, const uint8_t* src, int64_t n, float* dst) {
  switch (GgmlType(type)) {
    case GgmlType::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return Status::Ok();
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return Status::Ok();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return Status::Ok();
    case GgmlType::kQ8_0:
      if (n % 32 != 0) return Status::Error(StrCat("Q8_0 data of ", n, " elements is not whole blocks of 32"));
      for (int64_t b = 0; b < n / 32; ++b) {
        uint16_t d16;
        std::memcpy(&d16, src + b * 34, 2);
        const float d = F16ToF32(d16);
        for (int i = 0; i < 32; ++i) dst[b * 32 + i] = d * float(int8_t(src[b * 34 + 2 + i]));
      }
      return Status::Ok();
  }
  const GgmlTypeInfo* info = FindGgmlType(type);
  return Status::Error(StrCat("cannot convert ggml type ", info ? info->name : std::string_view("unknown"), " (", type,
                              ") to float; gemmakit reads F32, F16, BF16 and Q8_0"));
}

}  // namespace gk
