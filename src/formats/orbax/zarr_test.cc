// Zarr v2 / v3 metadata and chunk decoding: Orbax's exact metadata strings, the layouts other
// writers use (several inner chunks per shard, index at the start, big-endian, crc32c
// codecs), and clear refusals of what is not supported.
#include "formats/orbax/zarr.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>

#include "formats/orbax/crc32c.h"
#include "formats/orbax/zstd_codec.h"

namespace gk::orbax::zarr {
namespace {

// The fixtures' metadata, as TensorStore wrote it (../shared/spec/orbax.md §4).
constexpr const char* kV2 =
    R"({"chunks":[1,2],"compressor":{"id":"zstd","level":1},"dimension_separator":".","dtype":"<f4",)"
    R"("fill_value":null,"filters":null,"order":"C","shape":[2,4],"zarr_format":2})";
constexpr const char* kV3 =
    R"({"chunk_grid":{"configuration":{"chunk_shape":[8]},"name":"regular"},"chunk_key_encoding":{"name":"default"},)"
    R"("codecs":[{"configuration":{"chunk_shape":[8],"codecs":[{"configuration":{"endian":"little"},"name":"bytes"},)"
    R"({"configuration":{"checksum":false,"level":3},"name":"zstd"}],"index_codecs":[{"configuration":{"endian":"little"},)"
    R"("name":"bytes"},{"name":"crc32c"}]},"name":"sharding_indexed"}],"data_type":"int32","fill_value":0,)"
    R"("node_type":"array","shape":[8],"zarr_format":3})";

TEST(ZarrTest, ParsesOrbaxMetadata) {
  auto v2 = ParseMetadata(kV2, 2);
  ASSERT_TRUE(v2.ok()) << v2.message();
  EXPECT_EQ(v2->dtype, DType::kF32);
  EXPECT_EQ(v2->shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(v2->chunk_shape, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(v2->chain.zstd);
  EXPECT_EQ(v2->zstd_level, 1);
  EXPECT_EQ(v2->GridShape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(v2->ChunkKey({1, 0}), "1.0");

  auto v3 = ParseMetadata(kV3, 3);
  ASSERT_TRUE(v3.ok()) << v3.message();
  EXPECT_EQ(v3->dtype, DType::kI32);
  EXPECT_TRUE(v3->sharded);
  EXPECT_EQ(v3->inner_chunk_shape, (std::vector<int64_t>{8}));
  EXPECT_TRUE(v3->inner_chain.zstd);
  EXPECT_TRUE(v3->index_crc32c);
  EXPECT_TRUE(v3->index_at_end);
  EXPECT_EQ(v3->ChunkKey({0}), "c/0");
  ArrayMeta scalar = *v3;
  scalar.shape.clear();
  scalar.chunk_shape.clear();
  EXPECT_EQ(scalar.ChunkKey({}), "c");
  scalar.c_prefix = false;
  EXPECT_EQ(scalar.ChunkKey({}), "0");
}

// Our metadata is byte-identical to TensorStore's for the same array.
TEST(ZarrTest, MetadataJsonMatchesTensorStore) {
  auto v2 = MakeOrbaxMeta(2, DType::kF32, {2, 4}, {1, 2}, true);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(MetadataJson(*v2), kV2);
  auto v3 = MakeOrbaxMeta(3, DType::kI32, {8}, {8}, true);
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(MetadataJson(*v3), kV3);
  auto raw = MakeOrbaxMeta(2, DType::kBF16, {3}, {3}, false);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(MetadataJson(*raw),
            R"({"chunks":[3],"compressor":null,"dimension_separator":".","dtype":"bfloat16","fill_value":null,)"
            R"("filters":null,"order":"C","shape":[3],"zarr_format":2})");
  // Each emitted form parses back to the same layout.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI64, DType::kI32, DType::kI16,
                  DType::kI8, DType::kU8, DType::kBool, DType::kFp8E4m3, DType::kFp8E5m2}) {
    for (int f : {2, 3}) {
      auto m = MakeOrbaxMeta(f, t, {5, 0}, {2, 0}, f == 3);
      ASSERT_TRUE(m.ok()) << m.message();
      auto back = ParseMetadata(MetadataJson(*m), f);
      ASSERT_TRUE(back.ok()) << back.message();
      EXPECT_EQ(back->dtype, t) << MetadataJson(*m);
      EXPECT_EQ(back->chunk_shape, (std::vector<int64_t>{2, 1}));  // zero-size dims get chunk 1
      EXPECT_EQ(back->item_size, DTypeSize(t));
    }
  }
}

TEST(ZarrTest, UnsupportedFeaturesAreNamed) {
  const auto err = [](const std::string& text, int f) {
    auto r = ParseMetadata(text, f);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.message().find('\n'), std::string::npos);
    return r.ok() ? "" : r.message();
  };
  EXPECT_NE(err("{", 2).find(".zarray: not valid JSON"), std::string::npos);
  // nlohmann throws out_of_range on a number too large for a double: an error, not an abort.
  EXPECT_NE(err(R"({"zarr_format":3,"shape":[1e999]})", 3).find("zarr.json: not valid JSON: number overflow"),
            std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":2,"shape":"4","chunks":[2],"dtype":"<f4"})", 2).find("\"shape\" must be an array"),
            std::string::npos);
  EXPECT_NE(err("[]", 3).find("zarr.json must be a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":3})", 2).find("\"zarr_format\" must be 2"), std::string::npos);
  const std::string base = R"("zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<f4")";
  EXPECT_NE(err("{" + base + R"(,"order":"F"})", 2).find("order \"F\" is not supported"), std::string::npos);
  EXPECT_NE(err("{" + base + R"(,"compressor":{"id":"gzip"}})", 2).find("compressor 'gzip' is not supported"),
            std::string::npos);
  EXPECT_NE(err("{" + base + R"(,"filters":[{"id":"delta"}]})", 2).find("filters"), std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":2,"shape":[4],"chunks":[0],"dtype":"<f4"})", 2).find("out of range"), std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":2,"shape":[4,4],"chunks":[2],"dtype":"<f4"})", 2).find("differ in rank"),
            std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":2,"shape":"x","chunks":[2],"dtype":"<f4"})", 2).find("must be an array"),
            std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":2,"shape":[1099511627776,1099511627776],"chunks":[1,1],"dtype":"<f8"})", 2)
                .find("too large"),
            std::string::npos);
  EXPECT_NE(err(R"({"zarr_format":2,"shape":[4],"chunks":[1099511627776],"dtype":"<f8"})", 2).find("GiB a chunk may have"),
            std::string::npos);
  std::string v3 = kV3;
  EXPECT_NE(err(std::string(v3).replace(v3.find("sharding_indexed"), 16, "transposeXXXXXXX"), 3).find("not supported"),
            std::string::npos);
  std::string gz = v3;
  gz.replace(gz.find("\"zstd\""), 6, "\"gzip\"");
  EXPECT_NE(err(gz, 3).find("sharding_indexed.codecs: the zarr3 codec 'gzip' is not supported"), std::string::npos);
  std::string bad_inner = v3;
  bad_inner.replace(bad_inner.find("\"chunk_shape\":[8],\"codecs\""), 17, "\"chunk_shape\":[3]");
  EXPECT_NE(err(bad_inner, 3).find("not a multiple of the inner chunk shape"), std::string::npos);
  // Unknown dtypes parse (dtype kUnknown) and fail only when read.
  auto u = ParseMetadata(R"({"zarr_format":2,"shape":[2],"chunks":[2],"dtype":"<u4","compressor":null})", 2);
  ASSERT_TRUE(u.ok()) << u.message();
  EXPECT_EQ(u->dtype, DType::kUnknown);
  EXPECT_EQ(u->item_size, 4u);
  FileSet files;
  uint8_t out[8];
  const Status st = ReadArray(*u, "x/", files, [](const std::string&) { return nullptr; }, out);
  EXPECT_NE(st.message().find("dtype '<u4' is not supported"), std::string::npos) << st.message();
}

// A hand-built store for ReadArray.
struct Store {
  std::map<std::string, StoredValue> kv;
  FileSet files;
  void Put(const std::string& k, std::string v) {
    StoredValue sv;
    sv.inline_bytes = std::move(v);
    kv[k] = std::move(sv);
  }
  GetValueFn Get() const {
    return [this](const std::string& k) -> const StoredValue* {
      auto it = kv.find(k);
      return it == kv.end() ? nullptr : &it->second;
    };
  }
};

std::string Le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(char(uint8_t(v >> (8 * i))));
  return s;
}

std::string Le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(char(uint8_t(v >> (8 * i))));
  return s;
}

// int16 [5, 6] in shards of [4, 4] holding inner chunks of [2, 2] (4 per shard), zstd inner
// codec, index at the start with crc32c; chunks wholly outside the array absent.
TEST(ZarrTest, ShardsWithSeveralInnerChunks) {
  for (const bool at_start : {false, true}) {
    SCOPED_TRACE(at_start);
    const std::string meta = StrCat(
        R"({"zarr_format":3,"node_type":"array","shape":[5,6],"data_type":"int16",)",
        R"("chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4,4]}},)",
        R"("chunk_key_encoding":{"name":"default","configuration":{"separator":"."}},)",
        R"("codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],)",
        R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}],)",
        R"("index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},"crc32c"],)",
        R"("index_location":")", at_start ? "start" : "end", R"("}}],"fill_value":0})");
    auto m = ParseMetadata(meta, 3);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_FALSE(m->index_at_end == at_start);
    EXPECT_EQ(m->ChunkKey({1, 0}), "c.1.0");
    Store s;
    std::vector<int16_t> want(30);
    std::iota(want.begin(), want.end(), int16_t(-7));
    for (int64_t g0 = 0; g0 < 2; ++g0) {
      for (int64_t g1 = 0; g1 < 2; ++g1) {
        std::string data, index;
        const uint64_t index_bytes = 4 * 16 + 4;
        for (int64_t i0 = 0; i0 < 2; ++i0) {
          for (int64_t i1 = 0; i1 < 2; ++i1) {
            const int64_t r0 = g0 * 4 + i0 * 2, c0 = g1 * 4 + i1 * 2;
            if (r0 >= 5 || c0 >= 6) {  // wholly outside: absent
              index += Le64(~0ull) + Le64(~0ull);
              continue;
            }
            int16_t chunk[4] = {0, 0, 0, 0};
            for (int a = 0; a < 2; ++a) {
              for (int b = 0; b < 2; ++b) {
                if (r0 + a < 5 && c0 + b < 6) chunk[a * 2 + b] = want[size_t((r0 + a) * 6 + c0 + b)];
              }
            }
            auto z = ZstdCompress(chunk, sizeof(chunk), 3, true);
            ASSERT_TRUE(z.ok());
            index += Le64((at_start ? index_bytes : 0) + data.size()) + Le64(z->size());
            data += *z;
          }
        }
        index += Le32(Crc32c(index));
        s.Put(StrCat("arr/c.", g0, ".", g1), at_start ? index + data : data + index);
      }
    }
    std::vector<int16_t> got(30, 99);
    const Status st = ReadArray(*m, "arr/", s.files, s.Get(), reinterpret_cast<uint8_t*>(got.data()));
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got, want);
    // An inner chunk inside the array that is absent is an error.
    std::string& v = s.kv["arr/c.0.0"].inline_bytes;
    const size_t idx = at_start ? 0 : v.size() - 68;
    for (int i = 0; i < 16; ++i) v[idx + size_t(i)] = char(0xff);
    const uint32_t crc = Crc32c(v.data() + idx, 64);
    v.replace(idx + 64, 4, Le32(crc));
    const Status missing = ReadArray(*m, "arr/", s.files, s.Get(), reinterpret_cast<uint8_t*>(got.data()));
    EXPECT_NE(missing.message().find("inner chunk 0 is missing"), std::string::npos) << missing.message();
  }
}

// zarr v2 ">i4" raw chunks with "/" separators, a crc32c-checked zarr3 chunk without
// sharding, and edge chunks cropped.
TEST(ZarrTest, BigEndianAndCrcCodecs) {
  auto m = ParseMetadata(
      R"({"zarr_format":2,"shape":[3,2],"chunks":[2,2],"dtype":">i4","compressor":null,"dimension_separator":"/"})", 2);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE(m->chain.big_endian);
  Store s;
  const auto be = [](std::vector<int32_t> v) {
    std::string out;
    for (int32_t x : v) {
      for (int i = 3; i >= 0; --i) out.push_back(char(uint8_t(uint32_t(x) >> (8 * i))));
    }
    return out;
  };
  s.Put("p/0/0", be({1, 2, 3, 4}));
  s.Put("p/1/0", be({5, 6, -1, -1}));  // padded edge chunk
  int32_t got[6];
  ASSERT_TRUE(ReadArray(*m, "p/", s.files, s.Get(), reinterpret_cast<uint8_t*>(got)).ok());
  EXPECT_EQ(std::vector<int32_t>(got, got + 6), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));

  auto c = ParseMetadata(
      R"({"zarr_format":3,"node_type":"array","shape":[3],"data_type":"uint8","chunk_grid":{"name":"regular",)"
      R"("configuration":{"chunk_shape":[3]}},"chunk_key_encoding":{"name":"v2"},"codecs":[{"name":"bytes"},)"
      R"({"name":"zstd","configuration":{"level":0}},{"name":"crc32c"}]})",
      3);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_FALSE(c->sharded);
  const uint8_t raw[3] = {7, 8, 9};
  auto z = ZstdCompress(raw, 3, 0, false);
  ASSERT_TRUE(z.ok());
  s.Put("u/0", *z + Le32(Crc32c(*z)));
  uint8_t out[3];
  ASSERT_TRUE(ReadArray(*c, "u/", s.files, s.Get(), out).ok());
  EXPECT_EQ(out[2], 9);
  s.Put("u/0", *z + Le32(Crc32c(*z) ^ 1));
  EXPECT_NE(ReadArray(*c, "u/", s.files, s.Get(), out).message().find("fails its crc32c check"), std::string::npos);
}

// WriteArray and ReadArray agree on every chunk placement: partial edges in several
// dimensions, chunks equal to the array, chunks larger than the array, rank 0.
TEST(ZarrTest, WriteReadPlacement) {
  struct Case {
    std::vector<int64_t> shape, chunks;
  };
  const Case cases[] = {{{7, 5, 3}, {2, 2, 2}}, {{7, 5, 3}, {7, 5, 3}}, {{4, 6}, {1, 6}}, {{4, 6}, {3, 4}},
                        {{3}, {8}},             {{}, {}},               {{2, 1, 9}, {1, 1, 4}}};
  for (const Case& k : cases) {
    for (int f : {2, 3}) {
      for (bool zstd : {false, true}) {
        auto m = MakeOrbaxMeta(f, DType::kI16, k.shape, k.chunks, zstd);
        ASSERT_TRUE(m.ok()) << m.message();
        std::vector<int16_t> src(m->numel());
        std::iota(src.begin(), src.end(), int16_t(3));
        Store s;
        ASSERT_TRUE(WriteArray(*m, "x/", reinterpret_cast<const uint8_t*>(src.data()),
                               [&](std::string key, std::string_view v) {
                                 s.Put(key, std::string(v));
                                 return Status::Ok();
                               })
                        .ok());
        uint64_t n_chunks = 1;
        for (int64_t g : m->GridShape()) n_chunks *= uint64_t(g);
        EXPECT_EQ(s.kv.size(), n_chunks);
        std::vector<int16_t> got(src.size() + 1, -1);
        const Status st = ReadArray(*m, "x/", s.files, s.Get(), reinterpret_cast<uint8_t*>(got.data()));
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_EQ(got.back(), -1);
        got.pop_back();
        EXPECT_EQ(got, src) << "format " << f << " rank " << k.shape.size();
      }
    }
  }
}

}  // namespace
}  // namespace gk::orbax::zarr
