#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk {
namespace {

namespace fs = std::filesystem;

// Little-endian bytes written by hand: the layout the tests check the writer against and the
// damaged files the reader must refuse.
struct Bytes {
  std::string b;
  Bytes& Raw(const void* p, size_t n) { b.append(static_cast<const char*>(p), n); return *this; }
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& F32(float v) { return Raw(&v, 4); }
  Bytes& Str(std::string_view s) { U64(s.size()); b.append(s); return *this; }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.append("GGUF");
    U32(version);
    U64(n_tensors);
    return U64(n_kv);
  }
  Bytes& PadTo(size_t align) { b.resize((b.size() + align - 1) / align * align, '\0'); return *this; }
};

std::string WriteBytes(const std::string& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

GgufTensorSpec Spec(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  GgufTensorSpec t{std::move(name), type, std::move(ne), nullptr};
  t.fill = [data](uint8_t* dst, size_t n) {
    if (n != data.size()) return Status::Error(StrCat("fill asked for ", n, " bytes, has ", data.size()));
    if (n > 0) std::memcpy(dst, data.data(), n);  // (an empty vector's data() may be null)
    return Status::Ok();
  };
  return t;
}

template <class T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string ErrorOf(const std::string& path) {
  auto g = GgufFile::Open(path);
  return g.ok() ? std::string("(opened)") : g.message();
}

TEST(GgufTest, WriterMatchesTheByteLayoutOfTheFormat) {
  const std::string dir = TestTempDir("gguf_layout");
  fs::create_directories(dir);
  const std::string path = dir + "/a.gguf";
  const std::vector<float> w = {1.f, 2.f, 3.f};
  ASSERT_TRUE(WriteGguf(path, {{"general.architecture", GgufValue::String("gemma4")}},
                        {Spec("w", GgmlType::kF32, {3}, AsBytes(w))}).ok());
  Bytes e;
  e.Header(1, 1).Str("general.architecture").U32(8).Str("gemma4");
  e.Str("w").U32(1).U64(3).U32(0).U64(0);
  e.PadTo(32);
  for (float x : w) e.F32(x);
  e.PadTo(32);
  auto got = ReadFile(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, e.b);
}

TEST(GgufTest, RoundTripOfEveryValueTypeAndTensorType) {
  const std::string dir = TestTempDir("gguf_roundtrip");
  fs::create_directories(dir);
  const std::string path = dir + "/r.gguf";
  std::vector<GgufKv> kvs = {
      {"u8", GgufValue::U8(200)},
      {"i8", GgufValue::I8(-100)},
      {"u16", GgufValue::U16(60000)},
      {"i16", GgufValue::I16(-30000)},
      {"u32", GgufValue::U32(4000000000u)},
      {"i32", GgufValue::I32(-2000000000)},
      {"f32", GgufValue::F32(1.5f)},
      {"bool", GgufValue::Bool(true)},
      {"string", GgufValue::String("h\xC3\xA9llo \n \"x\"")},
      {"empty.string", GgufValue::String("")},
      {"u64", GgufValue::U64(18000000000000000000ull)},
      {"i64", GgufValue::I64(-9000000000000000000ll)},
      {"f64", GgufValue::F64(0.1)},
      {"strings", GgufValue::StringArray({"a", "", "\xE2\x96\x81the", "<0x0A>"})},
      {"i32s", GgufValue::I32Array({1, -2, 3})},
      {"u32s", GgufValue::U32Array({7, 8})},
      {"f32s", GgufValue::F32Array({-1000.f, 0.25f})},
      {"bools", GgufValue::BoolArray({true, false, true})},
      {"empty.array", GgufValue::I32Array({})},
  };
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> f32(6), q(64 * 3);
  for (float& x : f32) x = u(rng);
  for (float& x : q) x = u(rng);
  std::vector<uint16_t> f16(5), bf16(4);
  for (auto& h : f16) h = F32ToF16(u(rng));
  for (auto& h : bf16) h = F32ToBf16(u(rng));
  std::vector<uint8_t> q8(q.size() / 32 * 34);
  QuantizeQ8_0(q.data(), int64_t(q.size()), q8.data());
  std::vector<GgufTensorSpec> ts = {
      Spec("t.f32", GgmlType::kF32, {3, 2}, AsBytes(f32)),
      Spec("t.f16", GgmlType::kF16, {5}, AsBytes(f16)),
      Spec("t.bf16", GgmlType::kBF16, {1, 2, 1, 2}, AsBytes(bf16)),
      Spec("t.q8_0", GgmlType::kQ8_0, {64, 3}, q8),
      Spec("t.empty", GgmlType::kF32, {0}, {}),
  };
  ASSERT_TRUE(WriteGguf(path, kvs, ts).ok());

  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->data_offset() % 32, 0u);
  ASSERT_EQ(g->kvs().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    const GgufKv& a = kvs[i];
    const GgufKv& b = g->kvs()[i];
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.value.type(), b.value.type()) << a.key;
    EXPECT_EQ(a.value.elem_type(), b.value.elem_type()) << a.key;
    EXPECT_EQ(a.value.size(), b.value.size()) << a.key;
    EXPECT_EQ(a.value.raw(), b.value.raw()) << a.key;
    EXPECT_EQ(a.value.ToString(100), b.value.ToString(100)) << a.key;
  }
  int64_t i = 0;
  double d = 0;
  bool flag = false;
  EXPECT_TRUE(g->Find("i8")->GetInt(&i) && i == -100);
  EXPECT_TRUE(g->Find("u32")->GetInt(&i) && i == 4000000000ll);
  EXPECT_FALSE(g->Find("u64")->GetInt(&i));  // above INT64_MAX
  EXPECT_TRUE(g->Find("i64")->GetInt(&i) && i == -9000000000000000000ll);
  EXPECT_TRUE(g->Find("f64")->GetFloat(&d) && d == 0.1);
  EXPECT_TRUE(g->Find("bool")->GetBool(&flag) && flag);
  EXPECT_FALSE(g->Find("f32")->GetInt(&i));
  EXPECT_EQ(*g->Find("string")->GetString(), "h\xC3\xA9llo \n \"x\"");
  EXPECT_EQ(*g->Find("strings")->GetStrings(), (std::vector<std::string>{"a", "", "\xE2\x96\x81the", "<0x0A>"}));
  EXPECT_EQ(g->Find("i32s")->IntAt(1), -2);
  EXPECT_EQ(g->Find("f32s")->NumberAt(0), -1000.0);
  EXPECT_EQ(g->Find("bools")->IntAt(1), 0);
  EXPECT_EQ(g->Find("missing"), nullptr);

  ASSERT_EQ(g->tensors().size(), ts.size());
  EXPECT_TRUE(g->Contiguous());
  uint64_t offset = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    const GgufTensorInfo& t = g->tensors()[k];
    EXPECT_EQ(t.name, ts[k].name);
    EXPECT_EQ(t.type, uint32_t(ts[k].type));
    EXPECT_EQ(t.ne, ts[k].ne);
    EXPECT_EQ(t.offset, offset);
    EXPECT_EQ(t.file_offset, g->data_offset() + offset);
    offset += (t.nbytes + 31) / 32 * 32;
    std::vector<uint8_t> got(t.nbytes), want(t.nbytes);
    ASSERT_TRUE(g->ReadTensor(t, got.data()).ok());
    ASSERT_TRUE(ts[k].fill(want.data(), want.size()).ok());
    EXPECT_EQ(got, want) << t.name;
  }
  EXPECT_EQ(g->file_size(), g->data_offset() + offset);
  EXPECT_EQ(g->FindTensor("t.q8_0")->nbytes, 3u * 2 * 34);
  EXPECT_EQ(g->FindTensor("nope"), nullptr);
}

TEST(GgufTest, CustomAlignmentComesFromGeneralAlignment) {
  const std::string dir = TestTempDir("gguf_align");
  fs::create_directories(dir);
  const std::string path = dir + "/a.gguf";
  ASSERT_TRUE(WriteGguf(path, {{"general.alignment", GgufValue::U32(64)}},
                        {Spec("a", GgmlType::kF32, {3}, std::vector<uint8_t>(12, 1)),
                         Spec("b", GgmlType::kF32, {1}, std::vector<uint8_t>(4, 2))})
                  .ok());
  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->data_offset() % 64, 0u);
  EXPECT_EQ(g->FindTensor("b")->offset, 64u);
  EXPECT_TRUE(g->Contiguous());
  for (const GgufValue& bad : {GgufValue::U32(48), GgufValue::U32(0), GgufValue::U64(64)}) {
    Status s = WriteGguf(dir + "/b.gguf", {{"general.alignment", bad}}, {});
    EXPECT_NE(s.message().find("general.alignment must be a u32 power of two"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(fs::exists(dir + "/b.gguf"));
}

TEST(GgufTest, FillIsCalledOnceInOrderWithExactSizesAndFailureLeavesNoFile) {
  const std::string dir = TestTempDir("gguf_fill");
  fs::create_directories(dir);
  std::vector<std::pair<std::string, size_t>> calls;
  auto spec = [&](std::string name, std::vector<int64_t> ne, GgmlType type) {
    GgufTensorSpec t{name, type, ne, nullptr};
    t.fill = [&calls, name](uint8_t*, size_t n) {
      calls.emplace_back(name, n);
      return Status::Ok();
    };
    return t;
  };
  ASSERT_TRUE(WriteGguf(dir + "/ok.gguf", {}, {spec("x", {32, 3}, GgmlType::kQ8_0), spec("y", {7}, GgmlType::kBF16)}).ok());
  EXPECT_EQ(calls, (std::vector<std::pair<std::string, size_t>>{{"x", 102}, {"y", 14}}));

  GgufTensorSpec bad{"z", GgmlType::kF32, {2}, [](uint8_t*, size_t) { return Status::Error("disk on fire"); }};
  Status s = WriteGguf(dir + "/bad.gguf", {}, {bad});
  EXPECT_NE(s.message().find("tensor z: disk on fire"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir + "/bad.gguf"));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos);
}

TEST(GgufTest, WriterRejectsWhatGgmlWouldRefuse) {
  const std::string dir = TestTempDir("gguf_writer_errors");
  fs::create_directories(dir);
  const std::string path = dir + "/x.gguf";
  auto err = [&](std::vector<GgufKv> kvs, std::vector<GgufTensorSpec> ts) { return WriteGguf(path, kvs, ts).message(); };
  auto t = [](std::string name, std::vector<int64_t> ne, GgmlType type = GgmlType::kF32) {
    return GgufTensorSpec{std::move(name), type, std::move(ne), [](uint8_t*, size_t) { return Status::Ok(); }};
  };
  EXPECT_NE(err({{"k", GgufValue::U8(1)}, {"k", GgufValue::U8(2)}}, {}).find("metadata key k given twice"), std::string::npos);
  EXPECT_NE(err({}, {t("a", {1}), t("a", {2})}).find("tensor a given twice"), std::string::npos);
  EXPECT_NE(err({}, {t(std::string(64, 'n'), {1})}).find("must have 1 to 63 bytes"), std::string::npos);
  EXPECT_NE(err({}, {t("", {1})}).find("must have 1 to 63 bytes"), std::string::npos);
  EXPECT_NE(err({}, {t("a", {})}).find("has 0 dimensions"), std::string::npos);
  EXPECT_NE(err({}, {t("a", {1, 1, 1, 1, 1})}).find("has 5 dimensions"), std::string::npos);
  EXPECT_NE(err({}, {t("a", {2, -1})}).find("negative dimension -1"), std::string::npos);
  EXPECT_NE(err({}, {t("a", {33, 2}, GgmlType::kQ8_0)}).find("not a multiple of the Q8_0 block size 32"),
            std::string::npos);
  EXPECT_NE(err({}, {t("a", {1ll << 40, 1ll << 40})}).find("overflows 64 bits"), std::string::npos);
  EXPECT_EQ(WriteGguf(path, {}, {t(std::string(63, 'n'), {1})}).message(), "");
  EXPECT_TRUE(GgufFile::Open(path).ok());
}

// A valid file with two f32 tensors of 4 elements, offsets 0 and 32 (for damaging).
Bytes GoodFile() {
  Bytes b;
  b.Header(2, 1).Str("general.architecture").U32(8).Str("gemma4");
  b.Str("a").U32(1).U64(4).U32(0).U64(0);
  b.Str("b").U32(1).U64(4).U32(0).U64(32);
  b.PadTo(32);
  for (int i = 0; i < 4; ++i) b.F32(float(i));
  b.PadTo(32);
  for (int i = 0; i < 4; ++i) b.F32(float(10 + i));
  return b;
}

TEST(GgufTest, ReaderAcceptsTheHandBuiltFile) {
  const std::string dir = TestTempDir("gguf_good");
  auto g = GgufFile::Open(WriteBytes(dir, "g.gguf", GoodFile().b));
  ASSERT_TRUE(g.ok()) << g.message();
  std::vector<float> v(4);
  ASSERT_TRUE(g->ReadTensor(*g->FindTensor("b"), v.data()).ok());
  EXPECT_EQ(v, (std::vector<float>{10, 11, 12, 13}));
}

TEST(GgufTest, EveryTruncationIsAClearError) {
  const std::string dir = TestTempDir("gguf_trunc");
  const std::string full = GoodFile().b;
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string path = WriteBytes(dir, "t.gguf", full.substr(0, n));
    const std::string e = ErrorOf(path);
    EXPECT_NE(e.find(path + ": truncated"), std::string::npos) << "cut at " << n << ": " << e;
  }
}

TEST(GgufTest, DamagedHeadersAreRefusedWithTheReason) {
  const std::string dir = TestTempDir("gguf_damaged");
  auto check = [&](const std::string& bytes, const std::string& want) {
    const std::string path = WriteBytes(dir, "d.gguf", bytes);
    const std::string e = ErrorOf(path);
    EXPECT_NE(e.find(want), std::string::npos) << "want \"" << want << "\", got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  std::string s = GoodFile().b;
  s[0] = 'X';
  check(s, "not a GGUF file");
  check("GGU", "truncated");
  check(Bytes().Header(0, 0, 1).b, "unsupported GGUF version 1");
  check(Bytes().Header(0, 0, 4).b, "unsupported GGUF version 4");
  check(Bytes().Header(0, 0, 0x03000000u).b, "big-endian");
  check(Bytes().Header(0, 1000000).b, "claims 1000000 metadata entries");
  check(Bytes().Header(1000000, 0).b, "claims 1000000 tensors");
  check(Bytes().Header(0, 1).Str("k").U32(99).U32(0).b, "key k has unknown value type 99");
  check(Bytes().Header(0, 1).Str("k").U32(8).U64(1ull << 40).b, "truncated: value of k at offset");
  check(Bytes().Header(0, 1).Str("k").U32(9).U32(9).U64(1).U32(4).U64(0).b, "array of arrays");
  check(Bytes().Header(0, 1).Str("k").U32(9).U32(42).U64(1).U32(0).b, "array of unknown element type 42");
  check(Bytes().Header(0, 1).Str("k").U32(9).U32(5).U64(1ull << 40).U32(0).b, "claims 1099511627776 elements");
  check(Bytes().Header(0, 1).Str("k").U32(9).U32(8).U64(1ull << 40).U32(0).b, "claims 1099511627776 strings");
  check(Bytes().Header(0, 1).Str("k").U32(7).U8(2).U32(0).U32(0).b, "is a bool with byte value 2");
  check(Bytes().Header(0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2).b, "metadata key k appears twice");
  check(Bytes().Header(0, 1).Str("general.alignment").U32(4).U32(48).U32(0).b, "general.alignment must be a u32 power of two");
  check(Bytes().Header(0, 1).Str("general.alignment").U32(10).U64(32).U32(0).b, "general.alignment must be a u32 power of two");
  auto tensor_file = [](auto&& info) {
    Bytes b;
    b.Header(1, 0);
    info(b);
    b.PadTo(32);
    b.b.append(64, '\0');
    return b.b;
  };
  check(tensor_file([](Bytes& b) { b.Str("t").U32(0).U32(0).U64(0); }), "tensor t has 0 dimensions");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(5).U64(1).U64(1).U64(1).U64(1).U64(1).U32(0).U64(0); }),
        "tensor t has 5 dimensions");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(1).U64(4).U32(77).U64(0); }), "tensor t has unknown ggml type 77");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(1).U64(33).U32(8).U64(0); }), "not a multiple of the Q8_0 block size");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(1).U64(4).U32(0).U64(8); }), "offset 8, not a multiple of the alignment 32");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(1).U64(4).U32(0).U64(64); }), "runs past the end of the data section");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(1).U64(1000).U32(0).U64(0); }), "runs past the end of the data section");
  check(tensor_file([](Bytes& b) { b.Str("t").U32(2).U64(1ull << 62).U64(1ull << 62).U32(0).U64(0); }),
        "overflows 64 bits");
  check(tensor_file([](Bytes& b) { b.Str(std::string(64, 'x')).U32(1).U64(1).U32(0).U64(0); }),
        "has a name of 64 bytes");
  {
    Bytes b;
    b.Header(2, 0);
    b.Str("a").U32(1).U64(16).U32(0).U64(0);
    b.Str("b").U32(1).U64(4).U32(0).U64(32);
    b.PadTo(32);
    b.b.append(96, '\0');
    check(b.b, "tensors a [0, 64) and b [32, 48) overlap");
  }
  {
    Bytes b;
    b.Header(2, 0);
    b.Str("a").U32(1).U64(4).U32(0).U64(0);
    b.Str("a").U32(1).U64(4).U32(0).U64(32);
    b.PadTo(32);
    b.b.append(64, '\0');
    check(b.b, "tensor a appears twice");
  }
  EXPECT_TRUE(GgufFile::Open(WriteBytes(dir, "e.gguf", Bytes().Header(0, 0).b)).ok());
  EXPECT_NE(ErrorOf(dir + "/absent.gguf").find("cannot open"), std::string::npos);
  EXPECT_NE(ErrorOf(dir).find("not a regular file"), std::string::npos);
}

TEST(GgufTest, OutOfOrderTensorsAreValidButNotContiguous) {
  const std::string dir = TestTempDir("gguf_order");
  Bytes b;
  b.Header(2, 0);
  b.Str("a").U32(1).U64(4).U32(0).U64(32);
  b.Str("b").U32(1).U64(4).U32(0).U64(0);
  b.PadTo(32);
  b.b.append(64, '\0');
  auto g = GgufFile::Open(WriteBytes(dir, "o.gguf", b.b));
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_FALSE(g->Contiguous());
}

TEST(GgufTest, Q8_0MatchesGgmlReferenceRounding) {
  // d = 127 / 127 = 1: x · (1/d) lands exactly on .5, and ggml rounds half away from zero.
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -126.49f;
  uint8_t q[34];
  QuantizeQ8_0(x.data(), 32, q);
  uint16_t d16;
  std::memcpy(&d16, q, 2);
  EXPECT_EQ(d16, F32ToF16(1.f));
  EXPECT_EQ(int8_t(q[2]), 127);
  EXPECT_EQ(int8_t(q[3]), 3);
  EXPECT_EQ(int8_t(q[4]), -3);
  EXPECT_EQ(int8_t(q[5]), 1);
  EXPECT_EQ(int8_t(q[6]), -126);
  // An all-zero block: d = 0 and every code 0.
  std::vector<float> z(32, 0.f);
  QuantizeQ8_0(z.data(), 32, q);
  for (uint8_t v : q) EXPECT_EQ(v, 0);
  // Random data dequantizes within half a step plus the f16 rounding of d.
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 0.05f);
  std::vector<float> r(32 * 50), back(r.size());
  for (float& v : r) v = n(rng);
  std::vector<uint8_t> blocks(r.size() / 32 * 34);
  QuantizeQ8_0(r.data(), int64_t(r.size()), blocks.data());
  ASSERT_TRUE(DequantizeGgml(uint32_t(GgmlType::kQ8_0), blocks.data(), int64_t(r.size()), back.data()).ok());
  for (size_t b = 0; b < r.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(r[b * 32 + i]));
    const float d = amax / 127.f;
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(r[b * 32 + i] - back[b * 32 + i]), 0.5f * d + 127.f * d / 1024.f);
  }
}

TEST(GgufTest, DequantizeF16Bf16AndRefusesOtherTypes) {
  const std::vector<uint16_t> h = {F32ToF16(1.5f), F32ToF16(-0.25f)};
  const std::vector<uint16_t> b = {F32ToBf16(3.f), F32ToBf16(-7.f)};
  float out[2];
  ASSERT_TRUE(DequantizeGgml(1, reinterpret_cast<const uint8_t*>(h.data()), 2, out).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
  ASSERT_TRUE(DequantizeGgml(30, reinterpret_cast<const uint8_t*>(b.data()), 2, out).ok());
  EXPECT_EQ(out[1], -7.f);
  EXPECT_NE(DequantizeGgml(12, nullptr, 256, out).message().find("Q4_K"), std::string::npos);
  EXPECT_NE(DequantizeGgml(8, nullptr, 33, out).message().find("not whole blocks"), std::string::npos);
  EXPECT_EQ(FindGgmlType(12)->type_size, 144);
  EXPECT_EQ(FindGgmlType(8)->type_size, 34);
  EXPECT_EQ(FindGgmlType(4), nullptr);  // Q4_2, removed from ggml
}

}  // namespace
}  // namespace gk
