#include "formats/orbax/zarr.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include <nlohmann/json.hpp>

#include "formats/orbax/crc32c.h"
#include "formats/orbax/zstd_codec.h"
#include "util/guarded_parse.h"

namespace gk::orbax::zarr {
namespace {

using json = nlohmann::json;

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += StrCat(i ? ", " : "", s[i]);
  return out + "]";
}

uint64_t Product(const std::vector<int64_t>& v) {
  uint64_t p = 1;
  for (int64_t d : v) p *= uint64_t(d);
  return p;
}

// Product with overflow reported as ~0 (callers compare it against real sizes).
uint64_t CheckedProduct(const std::vector<int64_t>& v, uint64_t start = 1) {
  uint64_t p = start;
  for (int64_t d : v) {
    if (__builtin_mul_overflow(p, uint64_t(d), &p)) return ~uint64_t{0};
  }
  return p;
}

// A chunk buffer; large chunks (Orbax's are whole device shards, gigabytes) may not fit.
Result<std::unique_ptr<uint8_t[]>> AllocChunk(uint64_t n) {
  std::unique_ptr<uint8_t[]> p(new (std::nothrow) uint8_t[size_t(std::max<uint64_t>(n, 1))]);
  if (!p) return Result<std::unique_ptr<uint8_t[]>>::Error(StrCat("cannot allocate ", n, " bytes for one chunk"));
  return p;
}

// ---- dtypes ----

struct DTypeInfo {
  DType dtype;
  size_t size;
};

// numpy type codes of zarr v2: "<f4", ">i8", "|b1"; TensorStore adds "bfloat16" and the
// float8 names. Unknown codes with a recognisable size keep that size.
DTypeInfo FromV2Name(const std::string& n, bool* big_endian) {
  *big_endian = false;
  if (n == "bfloat16") return {DType::kBF16, 2};
  if (n == "float8_e4m3fn") return {DType::kFp8E4m3, 1};
  if (n == "float8_e5m2") return {DType::kFp8E5m2, 1};
  if (n.size() < 3 || (n[0] != '<' && n[0] != '>' && n[0] != '|')) return {DType::kUnknown, 0};
  *big_endian = n[0] == '>';
  const char kind = n[1];
  size_t size = 0;
  for (size_t i = 2; i < n.size(); ++i) {
    if (n[i] < '0' || n[i] > '9' || size > 1000) return {DType::kUnknown, 0};
    size = size * 10 + size_t(n[i] - '0');
  }
  DType t = DType::kUnknown;
  switch (kind) {
    case 'b': t = size == 1 ? DType::kBool : DType::kUnknown; break;
    case 'i':
      t = size == 1 ? DType::kI8 : size == 2 ? DType::kI16 : size == 4 ? DType::kI32 : size == 8 ? DType::kI64 : DType::kUnknown;
      break;
    case 'u': t = size == 1 ? DType::kU8 : DType::kUnknown; break;
    case 'f':
      t = size == 2 ? DType::kF16 : size == 4 ? DType::kF32 : size == 8 ? DType::kF64 : DType::kUnknown;
      break;
    default: break;
  }
  if (size == 1) *big_endian = false;
  return {t, size};
}

DTypeInfo FromV3Name(const std::string& n) {
  static const std::pair<const char*, DTypeInfo> kTable[] = {
      {"bool", {DType::kBool, 1}},       {"int8", {DType::kI8, 1}},
      {"int16", {DType::kI16, 2}},       {"int32", {DType::kI32, 4}},
      {"int64", {DType::kI64, 8}},       {"uint8", {DType::kU8, 1}},
      {"uint16", {DType::kUnknown, 2}},  {"uint32", {DType::kUnknown, 4}},
      {"uint64", {DType::kUnknown, 8}},  {"float16", {DType::kF16, 2}},
      {"float32", {DType::kF32, 4}},     {"float64", {DType::kF64, 8}},
      {"bfloat16", {DType::kBF16, 2}},   {"complex64", {DType::kUnknown, 8}},
      {"complex128", {DType::kUnknown, 16}}, {"float8_e4m3fn", {DType::kFp8E4m3, 1}},
      {"float8_e5m2", {DType::kFp8E5m2, 1}},
  };
  for (const auto& [name, info] : kTable) {
    if (n == name) return info;
  }
  return {DType::kUnknown, 0};
}

// ---- JSON field helpers (errors name the field) ----

Status ReadShape(const json& j, const char* field, bool positive, std::vector<int64_t>* out) {
  if (!j.is_array()) return Status::Error(StrCat("\"", field, "\" must be an array of integers, got ", j.dump()));
  if (j.size() > 32) return Status::Error(StrCat("\"", field, "\" has rank ", j.size(), " (at most 32 is supported)"));
  out->clear();
  for (const json& d : j) {
    if (!d.is_number_integer()) return Status::Error(StrCat("\"", field, "\" has a non-integer entry: ", j.dump()));
    const int64_t v = d.get<int64_t>();
    if (v < 0 || (positive && v == 0) || v > (int64_t{1} << 50)) {
      return Status::Error(StrCat("\"", field, "\" entry ", v, " is out of range in ", j.dump()));
    }
    out->push_back(v);
  }
  return Status::Ok();
}

const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Status ParseBytesCodec(const json& c, bool* big_endian, size_t item_size) {
  *big_endian = false;
  const json* cfg = Field(c, "configuration");
  if (cfg == nullptr || cfg->is_null()) {
    if (item_size > 1) return Status::Error("the bytes codec needs an \"endian\" for a multi-byte data type");
    return Status::Ok();
  }
  if (!cfg->is_object()) return Status::Error("bytes codec configuration must be an object");
  const json* e = Field(*cfg, "endian");
  if (e == nullptr || e->is_null()) {
    if (item_size > 1) return Status::Error("the bytes codec needs an \"endian\" for a multi-byte data type");
    return Status::Ok();
  }
  if (!e->is_string() || (*e != "little" && *e != "big")) {
    return Status::Error(StrCat("bytes codec endian must be \"little\" or \"big\", got ", e->dump()));
  }
  *big_endian = *e == "big" && item_size > 1;
  return Status::Ok();
}

std::string CodecName(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_object()) {
    const json* n = Field(c, "name");
    if (n != nullptr && n->is_string()) return n->get<std::string>();
  }
  return "";
}

// Parses a zarr3 codec list into a Chain (no sharding) or, at the top level, a sharding
// codec into `m`'s sharded fields.
Status ParseCodecs(const json& codecs, size_t item_size, bool allow_sharding, ArrayMeta* m, Chain* chain,
                   bool* sharded, int* zstd_level) {
  if (!codecs.is_array() || codecs.empty()) return Status::Error("\"codecs\" must be a non-empty array");
  size_t i = 0;
  // array -> array codecs: none supported.
  {
    const std::string n = CodecName(codecs[0]);
    if (n == "transpose") return Status::Error("the zarr3 transpose codec is not supported (Orbax does not write it)");
  }
  const std::string n0 = CodecName(codecs[i]);
  if (n0 == "bytes") {
    GK_RETURN_IF_ERROR(ParseBytesCodec(codecs[i], &chain->big_endian, item_size));
  } else if (n0 == "sharding_indexed") {
    if (!allow_sharding) return Status::Error("nested sharding_indexed codecs are not supported");
    *sharded = true;
    const json* cfg = Field(codecs[i], "configuration");
    if (cfg == nullptr || !cfg->is_object()) return Status::Error("sharding_indexed needs a configuration object");
    const json* cs = Field(*cfg, "chunk_shape");
    if (cs == nullptr) return Status::Error("sharding_indexed configuration has no \"chunk_shape\"");
    GK_RETURN_IF_ERROR(ReadShape(*cs, "sharding_indexed.chunk_shape", true, &m->inner_chunk_shape));
    const json* inner = Field(*cfg, "codecs");
    if (inner == nullptr) return Status::Error("sharding_indexed configuration has no \"codecs\"");
    bool nested = false;
    GK_RETURN_IF_ERROR(ParseCodecs(*inner, item_size, false, m, &m->inner_chain, &nested, zstd_level)
                           .Wrap("sharding_indexed.codecs"));
    const json* index = Field(*cfg, "index_codecs");
    if (index == nullptr) return Status::Error("sharding_indexed configuration has no \"index_codecs\"");
    Chain ic;
    int ignored = 0;
    GK_RETURN_IF_ERROR(ParseCodecs(*index, 8, false, m, &ic, &nested, &ignored).Wrap("sharding_indexed.index_codecs"));
    if (ic.zstd) return Status::Error("a compressed shard index is not supported");
    m->index_crc32c = ic.crc32c;
    m->index_big_endian = ic.big_endian;
    const json* loc = Field(*cfg, "index_location");
    if (loc != nullptr) {
      if (*loc == "end") {
        m->index_at_end = true;
      } else if (*loc == "start") {
        m->index_at_end = false;
      } else {
        return Status::Error(StrCat("sharding_indexed index_location must be \"start\" or \"end\", got ", loc->dump()));
      }
    }
  } else if (n0.empty()) {
    return Status::Error(StrCat("a codec has no name: ", codecs[i].dump()));
  } else {
    return Status::Error(StrCat("the zarr3 codec '", n0, "' is not supported (bytes and sharding_indexed are)"));
  }
  ++i;
  for (; i < codecs.size(); ++i) {
    const std::string n = CodecName(codecs[i]);
    if (n == "zstd") {
      if (chain->zstd || chain->crc32c) return Status::Error("unsupported codec order: zstd must come first and only once");
      chain->zstd = true;
      const json* cfg = Field(codecs[i], "configuration");
      if (cfg != nullptr && cfg->is_object()) {
        const json* l = Field(*cfg, "level");
        if (l != nullptr && l->is_number_integer()) *zstd_level = l->get<int>();
      }
    } else if (n == "crc32c") {
      if (chain->crc32c) return Status::Error("the crc32c codec appears twice");
      chain->crc32c = true;
    } else if (n == "bytes" || n == "sharding_indexed") {
      return Status::Error(StrCat("codec '", n, "' appears after the array-to-bytes codec"));
    } else {
      return Status::Error(StrCat("the zarr3 codec '", n.empty() ? codecs[i].dump() : n,
                                  "' is not supported (zstd and crc32c are)"));
    }
  }
  return Status::Ok();
}

Result<ArrayMeta> ParseV2(const json& j) {
  using R = Result<ArrayMeta>;
  ArrayMeta m;
  m.zarr_format = 2;
  const json* f = Field(j, "zarr_format");
  if (f == nullptr || !f->is_number_integer() || f->get<int64_t>() != 2) {
    return R::Error(StrCat(".zarray: \"zarr_format\" must be 2, got ", f ? f->dump() : "nothing"));
  }
  const json* shape = Field(j, "shape");
  const json* chunks = Field(j, "chunks");
  const json* dtype = Field(j, "dtype");
  if (shape == nullptr || chunks == nullptr || dtype == nullptr) {
    return R::Error(".zarray needs \"shape\", \"chunks\" and \"dtype\"");
  }
  GK_RETURN_IF_ERROR(ReadShape(*shape, "shape", false, &m.shape));
  GK_RETURN_IF_ERROR(ReadShape(*chunks, "chunks", true, &m.chunk_shape));
  if (!dtype->is_string()) return R::Error(StrCat(".zarray: structured dtype ", dtype->dump(), " is not supported"));
  m.dtype_name = dtype->get<std::string>();
  const DTypeInfo info = FromV2Name(m.dtype_name, &m.chain.big_endian);
  m.dtype = info.dtype;
  m.item_size = info.size;
  if (const json* order = Field(j, "order"); order != nullptr && *order != "C") {
    return R::Error(StrCat(".zarray: order ", order->dump(), " is not supported (only \"C\")"));
  }
  if (const json* filters = Field(j, "filters"); filters != nullptr && !filters->is_null() &&
                                                 !(filters->is_array() && filters->empty())) {
    return R::Error(StrCat(".zarray: filters ", filters->dump(), " are not supported"));
  }
  if (const json* c = Field(j, "compressor"); c != nullptr && !c->is_null()) {
    const json* id = c->is_object() ? Field(*c, "id") : nullptr;
    if (id == nullptr || !id->is_string()) return R::Error(StrCat(".zarray: compressor ", c->dump(), " has no \"id\""));
    if (*id != "zstd") {
      return R::Error(StrCat(".zarray: compressor '", id->get<std::string>(),
                             "' is not supported (Orbax writes zstd or none)"));
    }
    m.chain.zstd = true;
    if (const json* l = Field(*c, "level"); l != nullptr && l->is_number_integer()) m.zstd_level = l->get<int>();
  }
  if (const json* sep = Field(j, "dimension_separator"); sep != nullptr && !sep->is_null()) {
    if (*sep == ".") {
      m.separator = '.';
    } else if (*sep == "/") {
      m.separator = '/';
    } else {
      return R::Error(StrCat(".zarray: dimension_separator must be \".\" or \"/\", got ", sep->dump()));
    }
  }
  return m;
}

Result<ArrayMeta> ParseV3(const json& j) {
  using R = Result<ArrayMeta>;
  ArrayMeta m;
  m.zarr_format = 3;
  const json* f = Field(j, "zarr_format");
  if (f == nullptr || !f->is_number_integer() || f->get<int64_t>() != 3) {
    return R::Error(StrCat("zarr.json: \"zarr_format\" must be 3, got ", f ? f->dump() : "nothing"));
  }
  if (const json* nt = Field(j, "node_type"); nt == nullptr || *nt != "array") {
    return R::Error(StrCat("zarr.json: \"node_type\" must be \"array\", got ", nt ? nt->dump() : "nothing"));
  }
  const json* shape = Field(j, "shape");
  const json* dt = Field(j, "data_type");
  const json* grid = Field(j, "chunk_grid");
  const json* codecs = Field(j, "codecs");
  if (shape == nullptr || dt == nullptr || grid == nullptr || codecs == nullptr) {
    return R::Error("zarr.json needs \"shape\", \"data_type\", \"chunk_grid\" and \"codecs\"");
  }
  GK_RETURN_IF_ERROR(ReadShape(*shape, "shape", false, &m.shape));
  if (!dt->is_string()) return R::Error(StrCat("zarr.json: data_type ", dt->dump(), " is not supported"));
  m.dtype_name = dt->get<std::string>();
  const DTypeInfo info = FromV3Name(m.dtype_name);
  m.dtype = info.dtype;
  m.item_size = info.size;
  if (!grid->is_object() || CodecName(*grid) != "regular") {
    return R::Error(StrCat("zarr.json: chunk_grid ", grid->dump(), " is not a regular grid"));
  }
  const json* gc = Field(*grid, "configuration");
  const json* cs = gc != nullptr && gc->is_object() ? Field(*gc, "chunk_shape") : nullptr;
  if (cs == nullptr) return R::Error("zarr.json: chunk_grid has no configuration.chunk_shape");
  GK_RETURN_IF_ERROR(ReadShape(*cs, "chunk_grid.chunk_shape", true, &m.chunk_shape));
  m.c_prefix = true;
  m.separator = '/';
  if (const json* ke = Field(j, "chunk_key_encoding"); ke != nullptr) {
    const std::string name = CodecName(*ke);
    if (name == "v2") {
      m.c_prefix = false;
      m.separator = '.';
    } else if (name != "default") {
      return R::Error(StrCat("zarr.json: chunk_key_encoding ", ke->dump(), " is not supported"));
    }
    if (const json* kc = ke->is_object() ? Field(*ke, "configuration") : nullptr; kc != nullptr && kc->is_object()) {
      if (const json* sep = Field(*kc, "separator"); sep != nullptr) {
        if (*sep == ".") {
          m.separator = '.';
        } else if (*sep == "/") {
          m.separator = '/';
        } else {
          return R::Error(StrCat("zarr.json: chunk key separator ", sep->dump(), " is not supported"));
        }
      }
    }
  }
  if (const json* st = Field(j, "storage_transformers"); st != nullptr && !(st->is_array() && st->empty())) {
    return R::Error("zarr.json: storage_transformers are not supported");
  }
  GK_RETURN_IF_ERROR(ParseCodecs(*codecs, m.item_size, true, &m, &m.chain, &m.sharded, &m.zstd_level).Wrap("zarr.json"));
  if (m.sharded) {
    if (m.inner_chunk_shape.size() != m.shape.size()) {
      return R::Error(StrCat("zarr.json: sharding chunk_shape ", ShapeStr(m.inner_chunk_shape),
                             " has a different rank from shape ", ShapeStr(m.shape)));
    }
    for (size_t i = 0; i < m.shape.size(); ++i) {
      if (m.chunk_shape[i] % m.inner_chunk_shape[i] != 0) {
        return R::Error(StrCat("zarr.json: shard shape ", ShapeStr(m.chunk_shape),
                               " is not a multiple of the inner chunk shape ", ShapeStr(m.inner_chunk_shape)));
      }
    }
  }
  return m;
}

// ---- Chunk placement ----

// Copies between a chunk (full shape `c`, C order, at `chunk`) whose origin in the array is
// `o` and the array (shape `s`, at `arr`): the intersection only.
void CopyRegion(const std::vector<int64_t>& o, const std::vector<int64_t>& c, const std::vector<int64_t>& s,
                size_t isz, uint8_t* chunk, uint8_t* arr, bool to_array) {
  const int r = int(s.size());
  std::vector<int64_t> e(s.size());
  for (int i = 0; i < r; ++i) e[size_t(i)] = std::min(c[size_t(i)], s[size_t(i)] - o[size_t(i)]);
  std::vector<uint64_t> cstride(s.size()), astride(s.size());
  uint64_t cs = isz, as = isz;
  for (int i = r - 1; i >= 0; --i) {
    cstride[size_t(i)] = cs;
    astride[size_t(i)] = as;
    cs *= uint64_t(c[size_t(i)]);
    as *= uint64_t(s[size_t(i)]);
  }
  uint64_t base = 0;
  for (int i = 0; i < r; ++i) {
    if (e[size_t(i)] <= 0) return;
    base += uint64_t(o[size_t(i)]) * astride[size_t(i)];
  }
  // Trailing dimensions covered fully by both chunk and array merge into one contiguous run.
  int d = r - 1;
  uint64_t run = isz;
  while (d >= 0 && e[size_t(d)] == c[size_t(d)] && c[size_t(d)] == s[size_t(d)]) {
    run *= uint64_t(e[size_t(d)]);
    --d;
  }
  if (d >= 0) {
    run *= uint64_t(e[size_t(d)]);
  }
  const int outer = std::max(d, 0);  // dimensions [0, outer) are iterated
  std::vector<int64_t> idx(size_t(outer), 0);
  for (;;) {
    uint64_t co = 0, ao = base;
    for (int i = 0; i < outer; ++i) {
      co += uint64_t(idx[size_t(i)]) * cstride[size_t(i)];
      ao += uint64_t(idx[size_t(i)]) * astride[size_t(i)];
    }
    if (to_array) {
      std::memcpy(arr + ao, chunk + co, run);
    } else {
      std::memcpy(chunk + co, arr + ao, run);
    }
    int i = outer - 1;
    while (i >= 0 && ++idx[size_t(i)] == e[size_t(i)]) idx[size_t(i--)] = 0;
    if (i < 0) break;
  }
}

// True when the chunk at origin `o` lies wholly inside the array and its C-order bytes are
// one contiguous run of the array's; then it can be decoded straight into place.
bool ChunkIsContiguous(const std::vector<int64_t>& o, const std::vector<int64_t>& c,
                       const std::vector<int64_t>& s) {
  const size_t r = s.size();
  for (size_t i = 0; i < r; ++i) {
    if (o[i] + c[i] > s[i]) return false;
  }
  size_t d = r;
  while (d > 0 && c[d - 1] == s[d - 1]) --d;
  // dims [d, r) are full; dim d-1 may be partial; dims before it must be 1.
  for (size_t i = 0; i + 1 < d; ++i) {
    if (c[i] != 1) return false;
  }
  return true;
}

uint64_t ArrayOffset(const std::vector<int64_t>& o, const std::vector<int64_t>& s, size_t isz) {
  uint64_t off = 0, stride = isz;
  for (size_t i = s.size(); i-- > 0;) {
    off += uint64_t(o[i]) * stride;
    stride *= uint64_t(s[i]);
  }
  return off;
}

void SwapBytes(uint8_t* p, size_t n, size_t isz) {
  if (isz <= 1) return;
  for (size_t i = 0; i + isz <= n; i += isz) std::reverse(p + i, p + i + isz);
}

// Decodes bytes [off, off + len) of `v` through `chain` into exactly n bytes at dst.
Status DecodeChain(const Chain& chain, const FileSet& files, const StoredValue& v, uint64_t off, uint64_t len,
                   uint8_t* dst, size_t n, size_t isz) {
  uint64_t body = len;
  uint32_t crc = 0;
  if (chain.crc32c) {
    if (len < 4) return Status::Error(StrCat("the ", len, "-byte chunk is too short for its crc32c checksum"));
    body = len - 4;
  }
  if (chain.zstd) {
    GK_RETURN_IF_ERROR(ZstdDecompressExact(files, v, off, body, dst, n, chain.crc32c ? &crc : nullptr));
  } else {
    if (body != n) {
      return Status::Error(StrCat("the uncompressed chunk is ", body, " bytes, expected ", n,
                                  " (the chunk shape times the element size)"));
    }
    GK_RETURN_IF_ERROR(ReadValue(files, v, off, body, dst));
    if (chain.crc32c) crc = Crc32c(dst, n);
  }
  if (chain.crc32c) {
    uint8_t b[4];
    GK_RETURN_IF_ERROR(ReadValue(files, v, off + body, 4, b));
    const uint32_t stored = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
    if (stored != crc) return Status::Error("the chunk fails its crc32c check: the bytes are corrupt");
  }
  if (chain.big_endian) SwapBytes(dst, n, isz);
  return Status::Ok();
}

Status CheckChunkSize(const std::vector<int64_t>& c, size_t isz, const char* what) {
  uint64_t b = isz;
  for (int64_t d : c) {
    if (__builtin_mul_overflow(b, uint64_t(d), &b) || b > kMaxChunkBytes) {
      return Status::Error(StrCat(what, " ", ShapeStr(c), " is larger than the ", kMaxChunkBytes >> 30,
                                  " GiB a chunk may have"));
    }
  }
  return Status::Ok();
}

// "chunk 'a/0.1'", plus the file of a value stored out of line: "(.../d/1f2e... at offset 4096)".
std::string Where(const char* what, const std::string& key, const FileSet& files, const StoredValue& v) {
  if (v.file < 0) return StrCat(what, " '", key, "'");
  if (v.offset == 0) return StrCat(what, " '", key, "' (", files.path(v.file), ")");
  return StrCat(what, " '", key, "' (", files.path(v.file), " at offset ", v.offset, ")");
}

// Advances a C-order multi-index over `shape`; false after the last one.
bool NextIndex(std::vector<int64_t>* idx, const std::vector<int64_t>& shape) {
  for (size_t i = idx->size(); i-- > 0;) {
    if (++(*idx)[i] < shape[i]) return true;
    (*idx)[i] = 0;
  }
  return false;
}

}  // namespace

uint64_t ArrayMeta::numel() const { return Product(shape); }

std::vector<int64_t> ArrayMeta::GridShape() const {
  std::vector<int64_t> g(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) g[i] = (shape[i] + chunk_shape[i] - 1) / chunk_shape[i];
  return g;
}

std::string ArrayMeta::ChunkKey(const std::vector<int64_t>& grid) const {
  std::string k = c_prefix ? "c" : "";
  for (size_t i = 0; i < grid.size(); ++i) {
    if (i > 0 || c_prefix) k.push_back(separator);
    k += std::to_string(grid[i]);
  }
  if (k.empty()) k = "0";
  return k;
}

Result<ArrayMeta> ParseMetadata(std::string_view text, int zarr_format) {
  using R = Result<ArrayMeta>;
  const char* what = zarr_format == 2 ? ".zarray" : "zarr.json";
  GK_ASSIGN_OR_RETURN(json j, ParseJson(text, what));
  if (!j.is_object()) return R::Error(StrCat(what, " must be a JSON object"));
  // A field of an unexpected type makes nlohmann throw: an error (util/guarded_parse.h).
  Result<ArrayMeta> m = GuardedParse(what, [&] { return zarr_format == 2 ? ParseV2(j) : ParseV3(j); });
  if (!m.ok()) return m;
  if (m->chunk_shape.size() != m->shape.size()) {
    return R::Error(StrCat(what, ": chunk shape ", ShapeStr(m->chunk_shape), " and shape ", ShapeStr(m->shape),
                           " differ in rank"));
  }
  uint64_t bytes = std::max<size_t>(m->item_size, 1);
  for (int64_t d : m->shape) {
    if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes) || bytes > (uint64_t{1} << 56)) {
      return R::Error(StrCat(what, ": shape ", ShapeStr(m->shape), " is too large"));
    }
  }
  GK_RETURN_IF_ERROR(CheckChunkSize(m->chunk_shape, std::max<size_t>(m->item_size, 1), StrCat(what, ": chunk shape").c_str()));
  return m;
}

std::string ZarrV2DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "<f2";
    case DType::kF64: return "<f8";
    case DType::kI64: return "<i8";
    case DType::kI32: return "<i4";
    case DType::kI16: return "<i2";
    case DType::kI8: return "|i1";
    case DType::kU8: return "|u1";
    case DType::kBool: return "|b1";
    case DType::kFp8E4m3: return "float8_e4m3fn";
    case DType::kFp8E5m2: return "float8_e5m2";
    default: return "";
  }
}

std::string Zarr3DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kF64: return "float64";
    case DType::kI64: return "int64";
    case DType::kI32: return "int32";
    case DType::kI16: return "int16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kFp8E4m3: return "float8_e4m3fn";
    case DType::kFp8E5m2: return "float8_e5m2";
    default: return "";
  }
}

Result<ArrayMeta> MakeOrbaxMeta(int zarr_format, DType dtype, const std::vector<int64_t>& shape,
                                const std::vector<int64_t>& chunk_shape, bool zstd) {
  using R = Result<ArrayMeta>;
  if (zarr_format != 2 && zarr_format != 3) return R::Error(StrCat("zarr_format must be 2 or 3, not ", zarr_format));
  ArrayMeta m;
  m.zarr_format = zarr_format;
  m.dtype = dtype;
  m.item_size = DTypeSize(dtype);
  m.dtype_name = zarr_format == 2 ? ZarrV2DTypeName(dtype) : Zarr3DTypeName(dtype);
  if (m.dtype_name.empty()) return R::Error(StrCat("dtype ", DTypeName(dtype), " cannot be stored in zarr"));
  m.shape = shape;
  if (chunk_shape.size() != shape.size()) {
    return R::Error(StrCat("chunk shape ", ShapeStr(chunk_shape), " and shape ", ShapeStr(shape), " differ in rank"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return R::Error(StrCat("shape ", ShapeStr(shape), " has a negative dimension"));
    if (chunk_shape[i] < 0) return R::Error(StrCat("chunk shape ", ShapeStr(chunk_shape), " has a negative dimension"));
    // Orbax's rule: zero-size dimensions get chunk size 1.
    m.chunk_shape.push_back(chunk_shape[i] == 0 ? 1 : chunk_shape[i]);
  }
  GK_RETURN_IF_ERROR(CheckChunkSize(m.chunk_shape, m.item_size, "chunk shape"));
  if (zarr_format == 2) {
    m.separator = '.';
    m.chain.zstd = zstd;
    m.zstd_level = zstd ? 1 : 0;
  } else {
    m.c_prefix = true;
    m.separator = '/';
    m.sharded = true;
    m.inner_chunk_shape = m.chunk_shape;
    m.inner_chain.zstd = zstd;
    m.index_crc32c = true;
    m.zstd_level = zstd ? 3 : 0;
  }
  return m;
}

std::string MetadataJson(const ArrayMeta& m) {
  json j;
  if (m.zarr_format == 2) {
    j["chunks"] = m.chunk_shape;
    j["compressor"] = m.chain.zstd ? json{{"id", "zstd"}, {"level", m.zstd_level}} : json(nullptr);
    j["dimension_separator"] = std::string(1, m.separator);
    j["dtype"] = m.dtype_name;
    j["fill_value"] = nullptr;
    j["filters"] = nullptr;
    j["order"] = "C";
    j["shape"] = m.shape;
    j["zarr_format"] = 2;
    return j.dump();
  }
  const json bytes = {{"configuration", {{"endian", m.inner_chain.big_endian ? "big" : "little"}}}, {"name", "bytes"}};
  json inner = json::array({bytes});
  if (m.inner_chain.zstd) inner.push_back({{"configuration", {{"checksum", false}, {"level", m.zstd_level}}}, {"name", "zstd"}});
  json index = json::array({{{"configuration", {{"endian", "little"}}}, {"name", "bytes"}}});
  if (m.index_crc32c) index.push_back({{"name", "crc32c"}});
  j["chunk_grid"] = {{"configuration", {{"chunk_shape", m.chunk_shape}}}, {"name", "regular"}};
  j["chunk_key_encoding"] = {{"name", "default"}};
  j["codecs"] = json::array({{{"configuration", {{"chunk_shape", m.inner_chunk_shape}, {"codecs", inner}, {"index_codecs", index}}},
                              {"name", "sharding_indexed"}}});
  j["data_type"] = m.dtype_name;
  if (m.dtype == DType::kBool) {
    j["fill_value"] = false;
  } else if (m.dtype == DType::kF32 || m.dtype == DType::kF64 || m.dtype == DType::kF16 || m.dtype == DType::kBF16 ||
             m.dtype == DType::kFp8E4m3 || m.dtype == DType::kFp8E5m2) {
    j["fill_value"] = 0.0;
  } else {
    j["fill_value"] = 0;
  }
  j["node_type"] = "array";
  j["shape"] = m.shape;
  j["zarr_format"] = 3;
  return j.dump();
}

Status ReadArray(const ArrayMeta& m, const std::string& key_prefix, const FileSet& files, const GetValueFn& get,
                 uint8_t* dst) {
  if (m.dtype == DType::kUnknown || m.item_size == 0) {
    return Status::Error(StrCat("dtype '", m.dtype_name, "' is not supported (no matching gemmakit dtype)"));
  }
  const size_t isz = m.item_size;
  const int r = m.rank();
  if (m.numel() == 0) return Status::Ok();
  const std::vector<int64_t> grid = m.GridShape();
  const std::vector<int64_t>& c = m.sharded ? m.inner_chunk_shape : m.chunk_shape;
  const uint64_t chunk_bytes = Product(c) * isz;
  std::unique_ptr<uint8_t[]> buf;  // one chunk, allocated on first need
  const auto decode_into_place = [&](const Chain& chain, const StoredValue& v, uint64_t off, uint64_t len,
                                     const std::vector<int64_t>& origin) -> Status {
    if (ChunkIsContiguous(origin, c, m.shape)) {
      return DecodeChain(chain, files, v, off, len, dst + ArrayOffset(origin, m.shape, isz), size_t(chunk_bytes), isz);
    }
    if (!buf) {
      GK_ASSIGN_OR_RETURN(buf, AllocChunk(chunk_bytes));
    }
    GK_RETURN_IF_ERROR(DecodeChain(chain, files, v, off, len, buf.get(), size_t(chunk_bytes), isz));
    CopyRegion(origin, c, m.shape, isz, buf.get(), dst, /*to_array=*/true);
    return Status::Ok();
  };
  std::vector<int64_t> g(m.shape.size(), 0), origin(m.shape.size());
  do {
    const std::string key = key_prefix + m.ChunkKey(g);
    const StoredValue* v = get(key);
    if (v == nullptr) {
      return Status::Error(StrCat("chunk '", key, "' is missing (Orbax writes every chunk; the checkpoint is incomplete)"));
    }
    for (int i = 0; i < r; ++i) origin[size_t(i)] = g[size_t(i)] * m.chunk_shape[size_t(i)];
    if (!m.sharded) {
      GK_RETURN_IF_ERROR(decode_into_place(m.chain, *v, 0, v->size(), origin).Wrap(Where("chunk", key, files, *v)));
      continue;
    }
    // Shard: index of (offset, nbytes) per inner chunk, then (optionally) its CRC-32C.
    std::vector<int64_t> per(m.shape.size());
    for (int i = 0; i < r; ++i) per[size_t(i)] = m.chunk_shape[size_t(i)] / m.inner_chunk_shape[size_t(i)];
    const std::string where = Where("shard", key, files, *v);
    const uint64_t n_inner = CheckedProduct(per);
    const uint64_t index_bytes = n_inner > (uint64_t{1} << 40) ? ~uint64_t{0} : n_inner * 16 + (m.index_crc32c ? 4 : 0);
    if (index_bytes > v->size()) {
      return Status::Error(StrCat(where, " is ", v->size(), " bytes, too short for its ", index_bytes, "-byte index"));
    }
    const uint64_t index_off = m.index_at_end ? v->size() - index_bytes : 0;
    std::string index(size_t(index_bytes), '\0');
    GK_RETURN_IF_ERROR(ReadValue(files, *v, index_off, index_bytes, index.data()).Wrap(where));
    const auto* ib = reinterpret_cast<const uint8_t*>(index.data());
    if (m.index_crc32c) {
      const uint64_t body = index_bytes - 4;
      const uint32_t stored = uint32_t(ib[body]) | uint32_t(ib[body + 1]) << 8 | uint32_t(ib[body + 2]) << 16 |
                              uint32_t(ib[body + 3]) << 24;
      if (Crc32c(ib, size_t(body)) != stored) {
        return Status::Error(StrCat(where, ": the shard index fails its crc32c check: the bytes are corrupt"));
      }
    }
    const auto u64 = [&](uint64_t at) {
      uint64_t x = 0;
      for (int i = 0; i < 8; ++i) {
        const int sh = m.index_big_endian ? 8 * (7 - i) : 8 * i;
        x |= uint64_t(ib[at + uint64_t(i)]) << sh;
      }
      return x;
    };
    std::vector<int64_t> in(m.shape.size(), 0), io(m.shape.size());
    uint64_t k = 0;
    do {
      bool inside = true;
      for (int i = 0; i < r; ++i) {
        io[size_t(i)] = origin[size_t(i)] + in[size_t(i)] * m.inner_chunk_shape[size_t(i)];
        inside = inside && io[size_t(i)] < m.shape[size_t(i)];
      }
      const uint64_t off = u64(16 * k), nb = u64(16 * k + 8);
      ++k;
      if (!inside) continue;  // an inner chunk wholly outside the array holds nothing
      if (off == ~uint64_t{0} && nb == ~uint64_t{0}) {
        return Status::Error(StrCat(where, ": inner chunk ", k - 1,
                                    " is missing (Orbax writes every chunk; the checkpoint is incomplete)"));
      }
      const uint64_t data_begin = m.index_at_end ? 0 : index_bytes;
      const uint64_t data_end = m.index_at_end ? v->size() - index_bytes : v->size();
      if (off < data_begin || off > data_end || nb > data_end - off) {
        return Status::Error(StrCat(where, ": inner chunk ", k - 1, " at [", off, ", +", nb,
                                    ") lies outside the shard's ", v->size(), " bytes"));
      }
      GK_RETURN_IF_ERROR(decode_into_place(m.inner_chain, *v, off, nb, io).Wrap(StrCat(where, " inner chunk ", k - 1)));
    } while (NextIndex(&in, per));
  } while (NextIndex(&g, grid));
  return Status::Ok();
}

Status WriteArray(const ArrayMeta& m, const std::string& key_prefix, const uint8_t* src, const PutValueFn& put) {
  const size_t isz = m.item_size;
  const int r = m.rank();
  if (m.numel() == 0) return Status::Ok();
  if (m.sharded && m.inner_chunk_shape != m.chunk_shape) {
    return Status::Error("the writer emits one inner chunk per shard (inner chunk shape = chunk shape)");
  }
  const Chain& chain = m.sharded ? m.inner_chain : m.chain;
  if (chain.crc32c || chain.big_endian) return Status::Error("the writer emits little-endian chunks without a crc32c codec");
  const std::vector<int64_t> grid = m.GridShape();
  const uint64_t chunk_bytes = Product(m.chunk_shape) * isz;
  std::unique_ptr<uint8_t[]> buf;
  std::vector<int64_t> g(m.shape.size(), 0), origin(m.shape.size());
  // As TensorStore: zarr v2 zstd at level 1 without the content size, zarr3 at level 3 with it.
  const int level = m.zarr_format == 2 ? 1 : 3;
  do {
    for (int i = 0; i < r; ++i) origin[size_t(i)] = g[size_t(i)] * m.chunk_shape[size_t(i)];
    const uint8_t* raw;
    if (ChunkIsContiguous(origin, m.chunk_shape, m.shape)) {
      raw = src + ArrayOffset(origin, m.shape, isz);
    } else {
      if (!buf) {
        GK_ASSIGN_OR_RETURN(buf, AllocChunk(chunk_bytes));
      }
      std::memset(buf.get(), 0, chunk_bytes);  // edge chunks are stored padded
      CopyRegion(origin, m.chunk_shape, m.shape, isz, buf.get(), const_cast<uint8_t*>(src), /*to_array=*/false);
      raw = buf.get();
    }
    std::string value;
    if (chain.zstd) {
      GK_ASSIGN_OR_RETURN(value, ZstdCompress(raw, size_t(chunk_bytes), level, /*content_size=*/m.zarr_format == 3));
    } else {
      value.assign(reinterpret_cast<const char*>(raw), size_t(chunk_bytes));
    }
    if (m.sharded) {
      std::string index;
      const uint64_t n = value.size();
      for (int i = 0; i < 8; ++i) index.push_back('\0');  // offset 0
      for (int i = 0; i < 8; ++i) index.push_back(char(uint8_t(n >> (8 * i))));
      if (m.index_crc32c) {
        const uint32_t crc = Crc32c(index);
        for (int i = 0; i < 4; ++i) index.push_back(char(uint8_t(crc >> (8 * i))));
      }
      value += index;
    }
    GK_RETURN_IF_ERROR(put(key_prefix + m.ChunkKey(g), value));
  } while (NextIndex(&g, grid));
  return Status::Ok();
}

}  // namespace gk::orbax::zarr
