#include "formats/token_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "formats/safetensors.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TokenRow MakeRow(std::vector<int32_t> tokens, std::vector<uint8_t> mask) {
  return {std::move(tokens), std::move(mask)};
}

std::vector<TokenRow> FiveRows() {
  return {MakeRow({2, 105, 7}, {0, 0, 1}), MakeRow({2, 9}, {0, 1}), MakeRow({2, 105, 106, 107}, {0, 1, 1, 0}),
          MakeRow({2}, {0}), MakeRow({2, 3, 4, 5, 6}, {0, 0, 0, 1, 1})};
}

std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TokenDatasetTest, RoundTripAcrossShards) {
  const std::string root = TestTempDir("gk_token_dataset_rt");
  const std::string dir = root + "/ds";
  const json meta = {{"source", "x.jsonl"}, {"max_seq_len", 3072}, {"loss", "assistant"}};
  const std::vector<TokenRow> rows = FiveRows();
  ASSERT_TRUE(WriteTokenDataset(dir, rows, meta, /*rows_per_shard=*/2).ok());

  // 5 rows at 2 a shard: three shards; nothing else left beside the data set.
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"dataset.json", "shard-00000.safetensors",
                                                     "shard-00001.safetensors", "shard-00002.safetensors"}));
  EXPECT_EQ(Entries(root), std::vector<std::string>{"ds"});
  const json index = json::parse(*ReadFile(dir + "/dataset.json"));
  EXPECT_EQ(index["format"], "gemmakit-token-dataset");
  EXPECT_EQ(index["version"], 1);
  EXPECT_EQ(index["rows"], 5);
  EXPECT_EQ(index["tokens"], 15);
  EXPECT_EQ(index["loss_tokens"], 6);
  EXPECT_EQ(index["shards"][2], (json{{"file", "shard-00002.safetensors"}, {"rows", 1}}));
  EXPECT_EQ(index["meta"], meta);

  auto ds = TokenDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.message();
  EXPECT_EQ(ds->rows(), 5);
  EXPECT_EQ(ds->total_tokens(), 15);
  EXPECT_EQ(ds->total_loss_tokens(), 6);
  EXPECT_EQ(ds->meta(), meta);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ds->RowLength(i), int64_t(rows[i].tokens.size()));
    const TokenRow r = ds->Row(i);
    EXPECT_EQ(r.tokens, rows[i].tokens) << "row " << i;
    EXPECT_EQ(r.loss_mask, rows[i].loss_mask) << "row " << i;
  }

  // Any safetensors reader sees the documented tensors.
  auto f = SafetensorsFile::Open(dir + "/shard-00001.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  const TensorInfo* off = nullptr;
  for (const TensorInfo& t : (*f)->tensors()) {
    if (t.name == "offsets") off = &t;
  }
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(off->dtype, DType::kI64);
  std::vector<int64_t> offsets(3);
  ASSERT_TRUE((*f)->ReadInto(*off, offsets.data()).ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 4, 5}));
}

TEST(TokenDatasetTest, ReplacesAnExistingDataSetOnlyWhenComplete) {
  const std::string root = TestTempDir("gk_token_dataset_replace");
  const std::string dir = root + "/ds";
  ASSERT_TRUE(WriteTokenDataset(dir, FiveRows(), {{"run", 1}}, 1).ok());
  ASSERT_EQ(Entries(dir).size(), 6u);
  // A failing write (bad row) leaves the old data set untouched.
  EXPECT_FALSE(WriteTokenDataset(dir, {MakeRow({2, 3}, {0, 2})}, {{"run", 2}}).ok());
  auto old = TokenDataset::Open(dir);
  ASSERT_TRUE(old.ok()) << old.message();
  EXPECT_EQ(old->meta()["run"], 1);

  ASSERT_TRUE(WriteTokenDataset(dir + "/", {MakeRow({2, 40}, {0, 1})}, {{"run", 3}}).ok());
  auto ds = TokenDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.message();
  EXPECT_EQ(ds->rows(), 1);
  EXPECT_EQ(ds->meta()["run"], 3);
  // The old shards went with the old directory; no tmp or aside directory is left.
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"dataset.json", "shard-00000.safetensors"}));
  EXPECT_EQ(Entries(root), std::vector<std::string>{"ds"});
}

TEST(TokenDatasetTest, RefusesToReplaceADirectoryThatIsNotADataSet) {
  const std::string root = TestTempDir("gk_token_dataset_refuse");
  fs::create_directories(root + "/home");
  ASSERT_TRUE(WriteFileAtomic(root + "/home/notes.txt", "keep me").ok());
  Status s = WriteTokenDataset(root + "/home", FiveRows(), json::object());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("notes.txt"), std::string::npos) << s.message();
  EXPECT_EQ(*ReadFile(root + "/home/notes.txt"), "keep me");
  EXPECT_EQ(Entries(root), std::vector<std::string>{"home"});  // no tmp directory left
}

TEST(TokenDatasetTest, WriterRejectsBadRows) {
  const std::string root = TestTempDir("gk_token_dataset_badrows");
  const std::string dir = root + "/ds";
  struct Case {
    std::vector<TokenRow> rows;
    int64_t per_shard;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {{}, 4096, "no rows"},
      {{MakeRow({2}, {0}), MakeRow({}, {})}, 4096, "row 1 is empty"},
      {{MakeRow({2, 3}, {0})}, 4096, "2 tokens but 1 loss-mask"},
      {{MakeRow({2, 3}, {0, 2})}, 4096, "0 or 1"},
      {{MakeRow({2, 3}, {1, 1})}, 4096, "loss_mask[0]"},
      {{MakeRow({2, -3}, {0, 1})}, 4096, "negative"},
      {{MakeRow({2, 3}, {0, 1})}, 0, "rows_per_shard"},
  };
  for (const Case& c : cases) {
    Status s = WriteTokenDataset(dir, c.rows, json::object(), c.per_shard);
    ASSERT_FALSE(s.ok()) << c.needle;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(root)) << "nothing is created for bad input: " << c.needle;
  }
}

// ---- Open() on damaged data sets: one line, naming the file ----

struct RawShard {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets;
};

TensorSpec Spec(const std::string& name, DType dtype, const void* data, int64_t n) {
  return {name, dtype, {n}, [data](uint8_t* dst, size_t bytes) {
            std::memcpy(dst, data, bytes);
            return Status::Ok();
          }};
}

// A data set written by hand, so each field can be wrong on its own.
void WriteRaw(const std::string& dir, const RawShard& s, int64_t listed_rows, int64_t listed_tokens,
              int64_t listed_loss) {
  fs::create_directories(dir);
  ASSERT_TRUE(WriteSafetensors(dir + "/shard-00000.safetensors",
                               {Spec("tokens", DType::kI32, s.tokens.data(), int64_t(s.tokens.size())),
                                Spec("loss_mask", DType::kU8, s.mask.data(), int64_t(s.mask.size())),
                                Spec("offsets", DType::kI64, s.offsets.data(), int64_t(s.offsets.size()))})
                  .ok());
  const json index = {{"format", "gemmakit-token-dataset"},
                      {"version", 1},
                      {"rows", listed_rows},
                      {"tokens", listed_tokens},
                      {"loss_tokens", listed_loss},
                      {"shards", {{{"file", "shard-00000.safetensors"}, {"rows", listed_rows}}}},
                      {"meta", json::object()}};
  ASSERT_TRUE(WriteFileAtomic(dir + "/dataset.json", index.dump()).ok());
}

const RawShard kGood = {{2, 5, 6, 2, 7}, {0, 1, 1, 0, 1}, {0, 3, 5}};

void ExpectOpenError(const std::string& dir, const std::string& file, const std::string& needle) {
  auto ds = TokenDataset::Open(dir);
  ASSERT_FALSE(ds.ok()) << needle;
  const std::string& m = ds.message();
  EXPECT_NE(m.find(dir + "/" + file), std::string::npos) << "names the file: " << m;
  EXPECT_NE(m.find(needle), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
}

TEST(TokenDatasetOpenTest, HandWrittenGoodDataSetOpens) {
  const std::string dir = TestTempDir("gk_token_dataset_good");
  WriteRaw(dir, kGood, 2, 5, 3);
  auto ds = TokenDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.message();
  EXPECT_EQ(ds->Row(1).tokens, (std::vector<int32_t>{2, 7}));
}

TEST(TokenDatasetOpenTest, MissingDatasetJson) {
  const std::string dir = TestTempDir("gk_token_dataset_nojson");
  fs::create_directories(dir);
  ExpectOpenError(dir, "dataset.json", "not found");
}

TEST(TokenDatasetOpenTest, InvalidOrForeignDatasetJson) {
  const std::string dir = TestTempDir("gk_token_dataset_badjson");
  WriteRaw(dir, kGood, 2, 5, 3);
  ASSERT_TRUE(WriteFileAtomic(dir + "/dataset.json", "{\"format\": ").ok());
  ExpectOpenError(dir, "dataset.json", "not valid JSON");
  ASSERT_TRUE(WriteFileAtomic(dir + "/dataset.json", R"({"format": "something-else", "version": 1})").ok());
  ExpectOpenError(dir, "dataset.json", "\"format\"");
  ASSERT_TRUE(WriteFileAtomic(dir + "/dataset.json",
                              R"({"format": "gemmakit-token-dataset", "version": 1, "rows": 1, "tokens": 1,
                                  "loss_tokens": 0, "shards": [{"file": "../x.safetensors", "rows": 1}]})")
                  .ok());
  ExpectOpenError(dir, "dataset.json", "inside the data set directory");
  ASSERT_TRUE(WriteFileAtomic(dir + "/dataset.json",
                              R"({"format": "gemmakit-token-dataset", "version": 1, "rows": 4, "tokens": 10,
                                  "loss_tokens": 6, "shards": [{"file": "shard-00000.safetensors", "rows": 2},
                                                               {"file": "shard-00000.safetensors", "rows": 2}]})")
                  .ok());
  ExpectOpenError(dir, "dataset.json", "listed twice");
}

TEST(TokenDatasetOpenTest, TruncatedShard) {
  const std::string dir = TestTempDir("gk_token_dataset_trunc");
  WriteRaw(dir, kGood, 2, 5, 3);
  const std::string shard = dir + "/shard-00000.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 3);
  ExpectOpenError(dir, "shard-00000.safetensors", "truncated");
}

TEST(TokenDatasetOpenTest, MissingShard) {
  const std::string dir = TestTempDir("gk_token_dataset_noshard");
  WriteRaw(dir, kGood, 2, 5, 3);
  fs::remove(dir + "/shard-00000.safetensors");
  ExpectOpenError(dir, "shard-00000.safetensors", "cannot open");
}

TEST(TokenDatasetOpenTest, OffsetsNotMonotone) {
  const std::string dir = TestTempDir("gk_token_dataset_offsets");
  WriteRaw(dir, {kGood.tokens, kGood.mask, {0, 4, 3, 5}}, 3, 5, 3);
  ExpectOpenError(dir, "shard-00000.safetensors", "not increasing");
  WriteRaw(dir, {kGood.tokens, kGood.mask, {0, 3, 3, 5}}, 3, 5, 3);  // an empty row
  ExpectOpenError(dir, "shard-00000.safetensors", "not increasing");
  WriteRaw(dir, {kGood.tokens, kGood.mask, {0, 3, 4}}, 2, 5, 3);  // does not end at n
  ExpectOpenError(dir, "shard-00000.safetensors", "last offset is 4");
  WriteRaw(dir, {kGood.tokens, kGood.mask, {1, 3, 5}}, 2, 5, 3);
  ExpectOpenError(dir, "shard-00000.safetensors", "offsets[0]");
}

TEST(TokenDatasetOpenTest, MaskValueTwo) {
  const std::string dir = TestTempDir("gk_token_dataset_mask2");
  WriteRaw(dir, {kGood.tokens, {0, 1, 2, 0, 1}, kGood.offsets}, 2, 5, 4);
  ExpectOpenError(dir, "shard-00000.safetensors", "loss_mask[2] is 2");
  WriteRaw(dir, {kGood.tokens, {0, 1, 1, 1, 1}, kGood.offsets}, 2, 5, 4);  // row 1 starts with a target
  ExpectOpenError(dir, "shard-00000.safetensors", "row 1 has loss_mask 1 on its first token");
}

TEST(TokenDatasetOpenTest, RowsMismatch) {
  const std::string dir = TestTempDir("gk_token_dataset_rows");
  WriteRaw(dir, kGood, 3, 5, 3);  // dataset.json says 3 rows, the shard's offsets hold 2
  ExpectOpenError(dir, "shard-00000.safetensors", "lists 3 rows");
  WriteRaw(dir, kGood, 2, 6, 3);  // the totals disagree
  ExpectOpenError(dir, "dataset.json", "6 tokens");
  WriteRaw(dir, kGood, 2, 5, 2);
  ExpectOpenError(dir, "dataset.json", "2 loss tokens");
}

TEST(TokenDatasetOpenTest, WrongTensors) {
  const std::string dir = TestTempDir("gk_token_dataset_tensors");
  WriteRaw(dir, kGood, 2, 5, 3);
  const std::vector<float> f(5, 0.f);
  const std::vector<uint8_t> m = kGood.mask;
  const std::vector<int64_t> o = kGood.offsets;
  ASSERT_TRUE(WriteSafetensors(dir + "/shard-00000.safetensors",
                               {Spec("tokens", DType::kF32, f.data(), 5), Spec("loss_mask", DType::kU8, m.data(), 5),
                                Spec("offsets", DType::kI64, o.data(), 3)})
                  .ok());
  ExpectOpenError(dir, "shard-00000.safetensors", "\"tokens\" is F32");
  ASSERT_TRUE(WriteSafetensors(dir + "/shard-00000.safetensors",
                               {Spec("loss_mask", DType::kU8, m.data(), 5), Spec("offsets", DType::kI64, o.data(), 3)})
                  .ok());
  ExpectOpenError(dir, "shard-00000.safetensors", "holds 2 tensors");
}

}  // namespace
}  // namespace gk
