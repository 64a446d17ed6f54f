#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/atomic_file.h"

namespace gk {
namespace {

namespace fs = std::filesystem;

// Each test gets its own directory so tests can run in parallel processes.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           StrCat("gk_st_", ::getpid(), "_", info->test_suite_name(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }

  // A safetensors file built by hand, independent of our writer: LE length, JSON, data.
  static std::string Raw(const std::string& header, const std::string& data) {
    std::string s;
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) s.push_back(char((n >> (8 * i)) & 0xff));
    return s + header + data;
  }

  // Opens `path` expecting failure; returns the message.
  static std::string OpenError(const std::string& path) {
    auto r = SafetensorsSet::Open(path);
    EXPECT_FALSE(r.ok()) << "expected an error opening " << path;
    return r.ok() ? "" : r.message();
  }

  fs::path dir_;
};

using Bytes = std::vector<uint8_t>;

template <class T>
Bytes ToBytes(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TensorSpec Spec(const std::string& name, DType dtype, std::vector<int64_t> shape, Bytes data) {
  TensorSpec t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.fill = [data = std::move(data), name](uint8_t* dst, size_t n) -> Status {
    if (n != data.size()) return Status::Error(StrCat(name, ": fill got ", n, " bytes"));
    if (n > 0) std::memcpy(dst, data.data(), n);
    return Status::Ok();
  };
  return t;
}

// Reads every tensor both ways (pread and mmap) and checks it against `want`.
void ExpectTensor(const SafetensorsSet& set, const std::string& name, DType dtype,
                  const std::vector<int64_t>& shape, const Bytes& want) {
  SCOPED_TRACE(name);
  const TensorInfo* info = set.Find(name);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, dtype);
  EXPECT_EQ(info->shape, shape);
  ASSERT_EQ(info->nbytes, want.size());
  Bytes got(want.size());
  ASSERT_TRUE(set.ReadInto(*info, got.data()).ok());
  EXPECT_EQ(got, want);
  auto mapped = set.Map(*info);
  ASSERT_TRUE(mapped.ok()) << mapped.message();
  EXPECT_EQ(Bytes(*mapped, *mapped + want.size()), want);
}

std::vector<TensorSpec> MixedTensors() {
  std::vector<TensorSpec> t;
  t.push_back(Spec("w.f32", DType::kF32, {2, 3}, ToBytes<float>({1, -2, 3.5f, 0, 1e-8f, 7})));
  t.push_back(Spec("w.bf16", DType::kBF16, {3},
                   ToBytes<uint16_t>({F32ToBf16(1.5f), F32ToBf16(-2), F32ToBf16(0.25f)})));
  t.push_back(Spec("w.f16", DType::kF16, {1, 2}, ToBytes<uint16_t>({F32ToF16(0.5f), F32ToF16(-3)})));
  t.push_back(Spec("ids.i64", DType::kI64, {4}, ToBytes<int64_t>({-1, 0, 1LL << 40, 42})));
  t.push_back(Spec("scalar", DType::kF32, {}, ToBytes<float>({9})));
  t.push_back(Spec("empty", DType::kF32, {0, 4}, {}));
  return t;
}

TEST_F(SafetensorsTest, RoundTripDtypesWithMetadata) {
  const std::string path = Path("model.safetensors");
  std::vector<TensorSpec> specs = MixedTensors();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"origin", "test"}};
  ASSERT_TRUE(WriteSafetensors(path, specs, meta).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ((*file)->metadata(), meta);
  ASSERT_EQ((*file)->tensors().size(), specs.size());
  // Data region is 8-byte aligned and tensors appear in the order written.
  EXPECT_EQ((*file)->tensors()[0].offset % 8, 0u);
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ((*file)->tensors()[i].name, specs[i].name);

  auto set = SafetensorsSet::Open(dir_.string());
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->Names().size(), specs.size());
  for (const TensorSpec& s : specs) {
    Bytes want(0);
    // Recover the bytes the spec produces.
    auto info = set->Find(s.name);
    ASSERT_NE(info, nullptr);
    want.resize(info->nbytes);
    ASSERT_TRUE(s.fill(want.data(), want.size()).ok());
    ExpectTensor(*set, s.name, s.dtype, s.shape, want);
  }
  EXPECT_EQ(set->Find("scalar")->numel(), 1);
  EXPECT_EQ(set->Find("empty")->numel(), 0);
  EXPECT_EQ(set->Find("nope"), nullptr);
}

TEST_F(SafetensorsTest, ShardedRoundTripWithIndex) {
  std::vector<TensorSpec> specs;
  std::vector<Bytes> data;
  for (int i = 0; i < 5; ++i) {
    data.push_back(ToBytes<float>(std::vector<float>(16, float(i))));  // 64 bytes
    specs.push_back(Spec(StrCat("layer.", i), DType::kF32, {4, 4}, data.back()));
  }
  data.push_back(ToBytes<float>(std::vector<float>(100, 5)));  // 400 bytes: over the limit
  specs.push_back(Spec("big", DType::kF32, {100}, data.back()));
  ASSERT_TRUE(WriteSafetensorsDir(dir_.string(), specs, 150, {{"format", "pt"}}).ok());

  // 64+64 | 64+64 | 64 | 400 (alone, larger than the limit).
  for (int i = 1; i <= 4; ++i) {
    EXPECT_TRUE(fs::exists(dir_ / StrCat("model-0000", i, "-of-00004.safetensors"))) << i;
  }
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  auto text = ReadFile(Path("model.safetensors.index.json"));
  ASSERT_TRUE(text.ok());
  auto index = nlohmann::json::parse(*text);
  EXPECT_EQ(index["metadata"]["total_size"], 5 * 64 + 400);
  EXPECT_EQ(index["weight_map"]["layer.0"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["layer.3"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00004-of-00004.safetensors");

  auto set = SafetensorsSet::Open(dir_.string());
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->files().size(), 4u);
  EXPECT_EQ(set->Names().size(), 6u);
  for (size_t i = 0; i < specs.size(); ++i) {
    ExpectTensor(*set, specs[i].name, DType::kF32, specs[i].shape, data[i]);
  }
  // file_index agrees between the set's index and each file's own tensor list.
  for (size_t f = 0; f < set->files().size(); ++f) {
    for (const TensorInfo& t : set->files()[f]->tensors()) EXPECT_EQ(t.file_index, int(f));
  }
}

TEST_F(SafetensorsTest, SmallCheckpointWritesSingleFileAndDropsStaleIndex) {
  WriteBytes(Path("model.safetensors.index.json"), R"({"weight_map":{"old":"gone.safetensors"}})");
  ASSERT_TRUE(WriteSafetensorsDir(dir_.string(), MixedTensors(), 1 << 20).ok());
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  auto set = SafetensorsSet::Open(dir_.string());
  ASSERT_TRUE(set.ok()) << set.message();
  EXPECT_EQ(set->Names().size(), MixedTensors().size());
}

TEST_F(SafetensorsTest, ReadsFileFromIndependentWriter) {
  // Header keys out of file order, no padding, metadata last: all legal.
  const std::string header =
      R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
      R"("a":{"dtype":"U8","shape":[2,4],"data_offsets":[0,8]},)"
      R"("__metadata__":{"format":"pt"}})";
  Bytes a = {1, 2, 3, 4, 5, 6, 7, 8};
  Bytes b = ToBytes<int32_t>({-7, 123456});
  std::string data(a.begin(), a.end());
  data.append(b.begin(), b.end());
  WriteBytes(Path("x.safetensors"), Raw(header, data));

  auto set = SafetensorsSet::Open(Path("x.safetensors"));
  ASSERT_TRUE(set.ok()) << set.message();
  ExpectTensor(*set, "a", DType::kU8, {2, 4}, a);
  ExpectTensor(*set, "b", DType::kI32, {2}, b);
  EXPECT_EQ(set->files()[0]->metadata().at("format"), "pt");
  // A directory whose only checkpoint has a nonstandard name is opened too.
  auto by_dir = SafetensorsSet::Open(dir_.string());
  ASSERT_TRUE(by_dir.ok()) << by_dir.message();
  EXPECT_EQ(by_dir->Names(), (std::vector<std::string>{"a", "b"}));
}

// ---- Bad input: every case fails with a message naming the file and the problem. ----

TEST_F(SafetensorsTest, EmptyFile) {
  WriteBytes(Path("m.safetensors"), "");
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty or truncated"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, HeaderLengthPastEnd) {
  std::string raw = Raw(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  raw[0] = char(0xff);  // claims a 255+ byte header in a ~70 byte file
  raw[1] = char(0x10);
  WriteBytes(Path("m.safetensors"), raw);
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
  EXPECT_NE(msg.find("past the end"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, HugeHeaderLengthRejected) {
  std::string raw(8, '\xff');  // 2^64-1: must not overflow the range check
  WriteBytes(Path("m.safetensors"), raw + "{}");
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, TruncatedFile) {
  ASSERT_TRUE(WriteSafetensors(Path("m.safetensors"), MixedTensors()).ok());
  fs::resize_file(dir_ / "m.safetensors", fs::file_size(dir_ / "m.safetensors") - 5);
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("extend past the end of the file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, InvalidJson) {
  WriteBytes(Path("m.safetensors"), Raw(R"({"a": {"dtype": "F32", )", "abcd"));
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  WriteBytes(Path("m.safetensors"), Raw("[1, 2]", ""));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("JSON object"), std::string::npos);
}

TEST_F(SafetensorsTest, UnknownDtype) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"q":{"dtype":"Q4_K","shape":[4],"data_offsets":[0,4]}})", "abcd"));
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("tensor 'q'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown dtype \"Q4_K\""), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, MissingField) {
  WriteBytes(Path("m.safetensors"), Raw(R"({"q":{"dtype":"U8","shape":[4]}})", "abcd"));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("no \"data_offsets\""), std::string::npos);
}

TEST_F(SafetensorsTest, NegativeShape) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"q":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("negative dimension -4"), std::string::npos);
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  WriteBytes(Path("model.safetensors"),
             Raw(R"({"x":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}})",
                 std::string(64, 'z')));
  std::string msg = OpenError(Path("model.safetensors"));
  EXPECT_NE(msg.find("model.safetensors: tensor 'x' data_offsets [0, 100] extend past the end "
                     "of the file (data region is 64 bytes); the file is truncated or corrupt"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, OffsetsEndBeforeBegin) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", "abcd"));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("end before they begin"), std::string::npos);
}

TEST_F(SafetensorsTest, NegativeOffsets) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[-2,0]}})", "abcd"));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("non-negative integers"), std::string::npos);
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 std::string(12, '\0')));
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("'a' and 'b' overlap"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, DtypeShapeSizeMismatch) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                 std::string(24, '\0')));
  std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("tensor 'a' has dtype F32 and shape [2, 3], which is 24 bytes, but "
                     "data_offsets [0, 20] span 20 bytes"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, MetadataMustBeStrings) {
  WriteBytes(Path("m.safetensors"), Raw(R"({"__metadata__":{"n":3}})", ""));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("__metadata__ key 'n'"), std::string::npos);
}

TEST_F(SafetensorsTest, MissingShardFile) {
  ASSERT_TRUE(WriteSafetensors(Path("s1.safetensors"), MixedTensors()).ok());
  WriteBytes(Path("model.safetensors.index.json"),
             R"({"weight_map":{"w.f32":"s1.safetensors","other":"s2.safetensors"}})");
  std::string msg = OpenError(dir_.string());
  EXPECT_NE(msg.find("names shard 's2.safetensors'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, IndexNamesTensorNotInShard) {
  ASSERT_TRUE(WriteSafetensors(Path("s1.safetensors"), MixedTensors()).ok());
  WriteBytes(Path("model.safetensors.index.json"),
             R"({"weight_map":{"w.f32":"s1.safetensors","ghost":"s1.safetensors"}})");
  std::string msg = OpenError(dir_.string());
  EXPECT_NE(msg.find("tensor 'ghost' in s1.safetensors, but that shard has no such tensor"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, IndexShardOutsideDirectoryRejected) {
  WriteBytes(Path("model.safetensors.index.json"),
             R"({"weight_map":{"a":"../elsewhere.safetensors"}})");
  EXPECT_NE(OpenError(dir_.string()).find("not a file in this directory"), std::string::npos);
}

TEST_F(SafetensorsTest, DuplicateTensorAcrossShards) {
  ASSERT_TRUE(WriteSafetensors(Path("a.safetensors"), MixedTensors()).ok());
  ASSERT_TRUE(WriteSafetensors(Path("b.safetensors"), MixedTensors()).ok());
  std::string msg = OpenError(dir_.string());
  EXPECT_NE(msg.find("duplicate tensor"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, NoCheckpointInDirectory) {
  WriteBytes(Path("config.json"), "{}");
  std::string msg = OpenError(dir_.string());
  EXPECT_NE(msg.find("no model.safetensors or model.safetensors.index.json in"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, MissingPath) {
  EXPECT_NE(OpenError(Path("nothing_here")).find("no such file"), std::string::npos);
}

// ---- Writer errors ----

TEST_F(SafetensorsTest, WriterRejectsDuplicateNames) {
  std::vector<TensorSpec> specs = MixedTensors();
  specs.push_back(specs[0]);
  Status st = WriteSafetensors(Path("m.safetensors"), specs);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("duplicate tensor name 'w.f32'"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "m.safetensors"));
  EXPECT_FALSE(WriteSafetensorsDir(dir_.string(), specs, 16).ok());
}

TEST_F(SafetensorsTest, WriterFillErrorLeavesNoFile) {
  std::vector<TensorSpec> specs = MixedTensors();
  specs[2].fill = [](uint8_t*, size_t) { return Status::Error("disk on fire"); };
  Status st = WriteSafetensors(Path("m.safetensors"), specs);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("filling tensor 'w.f16': disk on fire"), std::string::npos)
      << st.message();
  EXPECT_TRUE(fs::is_empty(dir_));
}

// ---- AtomicFile ----

class AtomicFileTest : public SafetensorsTest {};

TEST_F(AtomicFileTest, UncommittedLeavesNoFile) {
  {
    auto f = AtomicFile::Create(Path("out.bin"));
    ASSERT_TRUE(f.ok()) << f.message();
    ASSERT_TRUE(f->Write("partial data").ok());
  }  // destroyed without Commit
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(AtomicFileTest, CommitReplacesTarget) {
  WriteBytes(Path("out.bin"), "old");
  ASSERT_TRUE(WriteFileAtomic(Path("out.bin"), "new contents").ok());
  auto text = ReadFile(Path("out.bin"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "new contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// Issue 24: a header number too large for a double made nlohmann throw out_of_range, which
// nothing caught (SIGABRT). Now one error line naming the file.
TEST_F(SafetensorsTest, NumberTooLargeForADoubleIsAnError) {
  WriteBytes(Path("m.safetensors"),
             Raw(R"({"x":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", "abcd"));
  const std::string msg = OpenError(Path("m.safetensors"));
  EXPECT_NE(msg.find("m.safetensors: header: not valid JSON: number overflow parsing '1e999'"), std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

// A shape nested a million deep: the error message would dump it, and nlohmann's dump()
// recurses, so the parser refuses the nesting itself.
TEST_F(SafetensorsTest, DeeplyNestedHeaderIsAnError) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  WriteBytes(Path("m.safetensors"), Raw(R"({"x":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})", "abcd"));
  EXPECT_NE(OpenError(Path("m.safetensors")).find("nesting deeper than"), std::string::npos);
  // Nesting within the limit reaches the field check, whose message quotes the value.
  const std::string nested = std::string(100, '[') + "1" + std::string(100, ']');
  WriteBytes(Path("n.safetensors"), Raw(R"({"x":{"dtype":"F32","shape":[)" + nested + R"(],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_NE(OpenError(Path("n.safetensors")).find("non-integer dimension"), std::string::npos);
}

TEST_F(SafetensorsTest, IndexWithANumberTooLargeIsAnError) {
  WriteBytes(Path("model.safetensors.index.json"), R"({"metadata": {"total_size": 1e999}, "weight_map": {}})");
  auto set = SafetensorsSet::Open(dir_.string());
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.message().find("model.safetensors.index.json: not valid JSON: number overflow"), std::string::npos)
      << set.message();
}

}  // namespace
}  // namespace gk
