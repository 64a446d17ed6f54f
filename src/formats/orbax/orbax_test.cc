// The Orbax writer against our reader: every layout (OCDBT or plain zarr, zarr v2 or zarr3,
// zstd or raw), dtypes including bf16, multi-chunk arrays with edge chunks, out-of-line OCDBT
// values and multi-level B+trees; the step commit protocol; and damaged copies of writer
// output, which must give one-line errors naming the file, never a crash or a hang.
#include "formats/orbax/orbax.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "formats/orbax/crc32c.h"
#include "formats/orbax/ocdbt.h"
#include "formats/orbax/zstd_codec.h"
#include "util/atomic_file.h"

namespace gk::orbax {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

class OrbaxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = StrCat("gk_orbax_", ::getpid(), "_", info->test_suite_name(), "_", info->name());
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::temp_directory_path() / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& p) const { return (dir_ / p).string(); }
  fs::path dir_;
};

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

ArraySpec Spec(std::vector<std::string> path, DType dtype, std::vector<int64_t> shape, Bytes data,
               std::vector<int64_t> chunks = {}) {
  ArraySpec s;
  s.path = std::move(path);
  s.dtype = dtype;
  s.shape = std::move(shape);
  s.chunk_shape = std::move(chunks);
  s.fill = [data = std::move(data)](uint8_t* dst, size_t n) -> Status {
    if (n != data.size()) return Status::Error(StrCat("fill got ", n, " bytes, have ", data.size()));
    if (n > 0) std::memcpy(dst, data.data(), n);
    return Status::Ok();
  };
  return s;
}

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Random contents of a valid bit pattern for the dtype (bool: 0/1).
Bytes RandomArray(DType t, const std::vector<int64_t>& shape, uint32_t seed) {
  Bytes b = RandomBytes(size_t(Numel(shape)) * DTypeSize(t), seed);
  if (t == DType::kBool) {
    for (auto& x : b) x &= 1;
  }
  return b;
}

struct Want {
  std::vector<std::string> path;
  DType dtype;
  std::vector<int64_t> shape, chunks;
  Bytes data;
};

std::vector<Want> TestArrays() {
  std::vector<Want> w = {
      {{"layers", "0", "attn", "q_einsum", "w_lora_a", "value"}, DType::kBF16, {64, 33}, {}, {}},
      {{"layers", "0", "attn", "q_einsum", "w_lora_b", "value"}, DType::kBF16, {4, 8, 16}, {1, 8, 16}, {}},
      {{"layers", "10", "mlp", "kernel"}, DType::kF32, {37, 19}, {8, 5}, {}},  // edge chunks
      {{"layers", "2", "mlp", "kernel"}, DType::kF32, {300, 7}, {128, 7}, {}},  // out-of-line chunks
      {{"opt", "count"}, DType::kI32, {}, {}, {}},                              // rank 0
      {{"opt", "mask"}, DType::kBool, {7}, {3}, {}},
      {{"ids"}, DType::kI64, {5, 2}, {}, {}},
      {{"small"}, DType::kI8, {3, 4, 5}, {2, 3, 2}, {}},
      {{"bytes"}, DType::kU8, {2000}, {1500}, {}},
      {{"half"}, DType::kF16, {4, 300}, {1, 300}, {}},
      {{"double"}, DType::kF64, {3, 3}, {}, {}},
      {{"i16"}, DType::kI16, {9}, {4}, {}},
      {{"fp8"}, DType::kFp8E4m3, {10}, {}, {}},
      {{"empty"}, DType::kF32, {0, 3}, {}, {}},  // zero-size: no chunks at all
  };
  uint32_t seed = 1;
  for (Want& a : w) {
    a.data = RandomArray(a.dtype, a.shape, seed++);
  }
  return w;
}

std::vector<ArraySpec> Specs(const std::vector<Want>& w) {
  std::vector<ArraySpec> s;
  for (const Want& a : w) s.push_back(Spec(a.path, a.dtype, a.shape, a.data, a.chunks));
  return s;
}

std::string Join(const std::vector<std::string>& p) {
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) s += (i ? "." : "") + p[i];
  return s;
}

void ExpectItemHolds(const Item& item, const std::vector<Want>& want) {
  ASSERT_EQ(item.arrays().size(), want.size());
  for (const Want& w : want) {
    const std::string name = Join(w.path);
    SCOPED_TRACE(name);
    const ArrayInfo* a = item.Find(name);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->path, w.path);
    EXPECT_EQ(a->dtype, w.dtype);
    EXPECT_EQ(a->shape, w.shape);
    if (!w.chunks.empty()) {
      EXPECT_EQ(a->chunk_shape, w.chunks);
    }
    ASSERT_EQ(a->nbytes(), w.data.size());
    Bytes got(w.data.size() + 1, 0xAB);  // one guard byte
    const Status st = item.Read(*a, got.data());
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got.back(), 0xAB) << "Read wrote past the array";
    got.pop_back();
    EXPECT_TRUE(got == w.data) << "contents differ";
  }
}

struct Layout {
  bool ocdbt;
  int zarr_format;
  bool zstd;
};

class OrbaxRoundTrip : public OrbaxTest, public ::testing::WithParamInterface<Layout> {};

TEST_P(OrbaxRoundTrip, WriteStepReadsBackIdentically) {
  const Layout l = GetParam();
  WriteOptions o;
  o.ocdbt = l.ocdbt;
  o.zarr_format = l.zarr_format;
  o.zstd = l.zstd;
  o.max_chunk_bytes = 1024;  // the default chunking splits the bf16 [64, 33] array too
  o.custom_metadata = {{"run", "bridge"}};
  const std::vector<Want> params = TestArrays();
  std::vector<Want> opt = {{{"mu", "0"}, DType::kF32, {6, 5}, {}, RandomArray(DType::kF32, {6, 5}, 99)}};
  const std::string root = Path("run");
  ASSERT_TRUE(WriteStep(root, 100, {{"model_params", Specs(params)}, {"optimizer_state", Specs(opt)}}, o).ok());
  ASSERT_TRUE(WriteStep(root, 200, {{"model_params", Specs(params)}}, o).ok());

  auto steps = ListSteps(root);
  ASSERT_TRUE(steps.ok()) << steps.message();
  EXPECT_EQ(*steps, (std::vector<int64_t>{100, 200}));
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    EXPECT_EQ(e.path().string().find(".orbax-checkpoint-tmp"), std::string::npos) << e.path();
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
  auto step = OpenStep(root + "/100");
  ASSERT_TRUE(step.ok()) << step.message();
  EXPECT_EQ(step->step, 100);
  EXPECT_EQ(step->items, (std::vector<std::string>{"model_params", "optimizer_state"}));
  EXPECT_EQ(step->pytree_items, step->items);
  EXPECT_EQ(step->v1_layout, l.zarr_format == 3);
  const nlohmann::json& cm = step->checkpoint_metadata;
  EXPECT_TRUE(cm["commit_timestamp_nsecs"].is_number_unsigned());
  EXPECT_GE(cm["commit_timestamp_nsecs"].get<uint64_t>(), cm["init_timestamp_nsecs"].get<uint64_t>());
  EXPECT_EQ(cm["custom_metadata"], (nlohmann::json{{"run", "bridge"}}));
  EXPECT_NE(cm["item_handlers"]["model_params"].get<std::string>().find("PyTree"), std::string::npos);
  EXPECT_TRUE(fs::exists(root + "/100/commit_success.txt"));

  auto item = Item::Open(step->ItemDir("model_params"));
  ASSERT_TRUE(item.ok()) << item.message();
  EXPECT_EQ((*item)->ocdbt(), l.ocdbt);
  EXPECT_EQ((*item)->zarr_format(), l.zarr_format);
  EXPECT_EQ((*item)->tree_metadata()["use_zarr3"], l.zarr_format == 3);
  EXPECT_EQ((*item)->tree_metadata()["use_ocdbt"], l.ocdbt);
  ExpectItemHolds(**item, params);
  const ArrayInfo* lora = (*item)->Find("layers.0.attn.q_einsum.w_lora_a.value");
  ASSERT_NE(lora, nullptr);
  EXPECT_GT(lora->chunk_shape[0], 1);  // split along axis 0 into ~1 KiB chunks
  EXPECT_LT(lora->chunk_shape[0], 64);
  EXPECT_EQ(lora->chunk_shape[1], 33);
  EXPECT_EQ(lora->stored_dtype, "bfloat16");
  auto opt_item = Item::Open(step->ItemDir("optimizer_state"));
  ASSERT_TRUE(opt_item.ok()) << opt_item.message();
  ExpectItemHolds(**opt_item, opt);
}

INSTANTIATE_TEST_SUITE_P(Layouts, OrbaxRoundTrip,
                         ::testing::Values(Layout{true, 3, true}, Layout{true, 3, false}, Layout{true, 2, true},
                                           Layout{true, 2, false}, Layout{false, 3, true}, Layout{false, 3, false},
                                           Layout{false, 2, true}, Layout{false, 2, false}),
                         [](const auto& info) {
                           return StrCat(info.param.ocdbt ? "ocdbt" : "plain", "_zarr", info.param.zarr_format,
                                         info.param.zstd ? "_zstd" : "_raw");
                         });

// Tiny B+tree nodes force interior levels (no fixture has them): the reader walks them.
TEST_F(OrbaxTest, MultiLevelBtree) {
  WriteOptions o;
  o.max_btree_node_entries = 3;
  const std::vector<Want> params = TestArrays();
  ASSERT_TRUE(WriteItem(Path("item"), Specs(params), o).ok());
  auto m = ReadFile(Path("item/manifest.ocdbt"));
  ASSERT_TRUE(m.ok());
  auto manifest = ocdbt::DecodeManifest(*m);
  ASSERT_TRUE(manifest.ok()) << manifest.message();
  EXPECT_GE(manifest->versions.back().root_height, 2);
  auto item = Item::Open(Path("item"));
  ASSERT_TRUE(item.ok()) << item.message();
  ExpectItemHolds(**item, params);
  // Statistics add up: every key counted once, every out-of-line byte once.
  FileSet files;
  std::map<std::string, StoredValue> kv;
  ASSERT_TRUE(ocdbt::ReadDatabase(Path("item"), &files, &kv).ok());
  uint64_t indirect = 0;
  for (const auto& [k, v] : kv) indirect += v.file >= 0 ? v.length : 0;
  EXPECT_EQ(manifest->versions.back().root.stats.num_keys, kv.size());
  EXPECT_EQ(manifest->versions.back().root.stats.num_indirect_value_bytes, indirect);
  EXPECT_GT(indirect, 0u);
}

// Chunks of 2 MiB (random, so zstd cannot shrink them) are decoded through several 1 MiB
// pieces of compressed input; an edge chunk along axis 0 goes through the chunk buffer.
TEST_F(OrbaxTest, LargeOutOfLineChunks) {
  for (int format : {2, 3}) {
    WriteOptions o;
    o.zarr_format = format;
    std::vector<Want> w = {{{"big"}, DType::kF32, {1100, 1024}, {512, 1024}, {}},
                           {{"bf"}, DType::kBF16, {700, 1536}, {}, {}}};
    o.max_chunk_bytes = 1u << 20;
    w[0].data = RandomArray(DType::kF32, w[0].shape, 11);
    w[1].data = RandomArray(DType::kBF16, w[1].shape, 12);
    const std::string dir = Path(StrCat("item", format));
    ASSERT_TRUE(WriteItem(dir, Specs(w), o).ok());
    auto item = Item::Open(dir);
    ASSERT_TRUE(item.ok()) << item.message();
    ExpectItemHolds(**item, w);
    // 2.05 MiB in near-equal pieces of at most 1 MiB: 3 of 234 rows (the last one 232).
    EXPECT_EQ((*item)->Find("bf")->chunk_shape, (std::vector<int64_t>{234, 1536}));
  }
}

TEST_F(OrbaxTest, TreeMetadataAsOrbaxWritesIt) {
  ArraySpec s = Spec({"layers", "3", "w"}, DType::kF32, {2}, Bytes(8, 0));
  s.key_types = {2, 1, 2};
  ASSERT_TRUE(WriteItem(Path("item"), {s}).ok());
  auto item = Item::Open(Path("item"));
  ASSERT_TRUE(item.ok()) << item.message();
  const nlohmann::json& tm = (*item)->tree_metadata();
  ASSERT_TRUE(tm["tree_metadata"].contains("('layers', '3', 'w')")) << tm.dump();
  const nlohmann::json& e = tm["tree_metadata"]["('layers', '3', 'w')"];
  EXPECT_EQ(e["key_metadata"][1]["key"], 3);  // sequence keys as integers, as new Orbax writes
  EXPECT_EQ(e["key_metadata"][1]["key_type"], 1);
  EXPECT_EQ(e["value_metadata"]["value_type"], "jax.Array");
  EXPECT_EQ(e["value_metadata"]["write_shape"], (nlohmann::json{2}));
  EXPECT_TRUE(tm["store_array_data_equal_to_fill_value"].get<bool>());
  const ArrayInfo* a = (*item)->Find("layers.3.w");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->key_types, (std::vector<int>{2, 1, 2}));
  EXPECT_EQ(a->path, (std::vector<std::string>{"layers", "3", "w"}));
  auto sharding = ReadFile(Path("item/_sharding"));
  ASSERT_TRUE(sharding.ok());
  EXPECT_NE(sharding->find("\"bGF5ZXJzLjMudw==\""), std::string::npos) << *sharding;  // base64url("layers.3.w")
  EXPECT_TRUE(fs::exists(Path("item/array_metadatas/process_0")));
}

TEST(OrbaxReprTest, PythonTupleRepr) {
  EXPECT_EQ(PythonTupleRepr({"a"}), "('a',)");
  EXPECT_EQ(PythonTupleRepr({"b", "c"}), "('b', 'c')");
  EXPECT_EQ(PythonTupleRepr({}), "()");
  EXPECT_EQ(PythonTupleRepr({"it's"}), "(\"it's\",)");
  EXPECT_EQ(PythonTupleRepr({"a'\"b"}), "('a\\'\"b',)");
  EXPECT_EQ(PythonTupleRepr({"x\\y", "t\tn\n"}), "('x\\\\y', 't\\tn\\n')");
}

TEST_F(OrbaxTest, WriterRefusesBadInput) {
  const auto err = [&](const std::vector<ArraySpec>& specs, const std::string& dir) {
    const Status st = WriteItem(Path(dir), specs);
    EXPECT_FALSE(st.ok());
    return st.message();
  };
  EXPECT_NE(err({Spec({"a"}, DType::kF32, {2}, Bytes(8)), Spec({"a"}, DType::kF32, {2}, Bytes(8))}, "dup").find("twice"),
            std::string::npos);
  EXPECT_NE(err({Spec({"a"}, DType::kQ8_0, {2}, Bytes(2))}, "q8").find("cannot be stored in zarr"), std::string::npos);
  EXPECT_NE(err({Spec({"a"}, DType::kF32, {2}, Bytes(4))}, "short").find("fill got 8 bytes"), std::string::npos);
  EXPECT_NE(err({Spec({"a"}, DType::kF32, {2, 2}, Bytes(16), {2})}, "rank").find("differ in rank"), std::string::npos);
  EXPECT_NE(err({Spec({}, DType::kF32, {2}, Bytes(8))}, "nopath").find("empty tree path"), std::string::npos);
  EXPECT_FALSE(fs::exists(Path("short")));  // a failed write leaves nothing behind
  EXPECT_FALSE(fs::exists(Path("short.orbax-checkpoint-tmp")));
  ASSERT_TRUE(WriteItem(Path("ok"), {Spec({"a"}, DType::kF32, {2}, Bytes(8))}).ok());
  EXPECT_NE(err({Spec({"a"}, DType::kF32, {2}, Bytes(8))}, "ok").find("already exists"), std::string::npos);
  EXPECT_FALSE(WriteStep(Path("root"), 5, {{"a/b", {}}}).ok());
  ASSERT_TRUE(WriteStep(Path("root"), 5, {{"x", {Spec({"a"}, DType::kF32, {2}, Bytes(8))}}}).ok());
  EXPECT_NE(WriteStep(Path("root"), 5, {{"x", {}}}).message().find("already exists"), std::string::npos);
}

// A crashed save leaves <step>.orbax-checkpoint-tmp: readers skip it, the next save replaces it.
TEST_F(OrbaxTest, TemporaryDirectoriesAreNotSteps) {
  const std::string root = Path("run");
  fs::create_directories(root + "/300.orbax-checkpoint-tmp/model_params");
  fs::create_directories(root + "/400.orbax-checkpoint-tmp-1712345678");
  fs::create_directories(root + "/metadata");
  ASSERT_TRUE(WriteStep(root, 100, {{"p", {Spec({"a"}, DType::kF32, {1}, Bytes(4))}}}).ok());
  ASSERT_TRUE(WriteStep(root, 300, {{"p", {Spec({"a"}, DType::kF32, {1}, Bytes(4))}}}).ok());
  fs::create_directories(root + "/step_7");
  auto steps = ListSteps(root);
  ASSERT_TRUE(steps.ok()) << steps.message();
  EXPECT_EQ(*steps, (std::vector<int64_t>{7, 100, 300}));
  EXPECT_FALSE(fs::exists(root + "/300.orbax-checkpoint-tmp"));
  EXPECT_FALSE(OpenStep(root + "/400.orbax-checkpoint-tmp-1712345678").ok());
  auto d = StepDir(root, 7);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(fs::path(*d).filename(), "step_7");
  fs::create_directories(root + "/0100");
  EXPECT_NE(ListSteps(root).message().find("both hold step 100"), std::string::npos);
}

// ---- Damaged input: one-line errors that name the file ----

void ExpectOneLineError(const Status& st, const std::string& needle) {
  EXPECT_FALSE(st.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

// Opens the item and reads every array; the first error.
Status OpenAndReadAll(const std::string& dir) {
  auto item = Item::Open(dir);
  if (!item.ok()) return item.status();
  for (const ArrayInfo& a : (*item)->arrays()) {
    Bytes buf(a.nbytes());
    GK_RETURN_IF_ERROR((*item)->Read(a, buf.data()));
  }
  return Status::Ok();
}

std::string DataFile(const std::string& item) {
  for (const auto& e : fs::directory_iterator(item + "/d")) return e.path().string();
  return "";
}

void Overwrite(const std::string& path, const std::string& bytes) {
  std::error_code ec;
  fs::permissions(path, fs::perms::owner_write, fs::perm_options::add, ec);  // absent: created below
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string Slurp(const std::string& path) {
  auto r = ReadFile(path);
  EXPECT_TRUE(r.ok()) << path;
  return r.ok() ? *r : "";
}

class OrbaxDamageTest : public OrbaxTest {
 protected:
  // An OCDBT item with inline and out-of-line chunks.
  std::string MakeItem(const std::string& name, WriteOptions o = {}) {
    const std::string dir = Path(name);
    std::vector<ArraySpec> s = {Spec({"big"}, DType::kF32, {600}, RandomArray(DType::kF32, {600}, 5), {300}),
                                Spec({"small"}, DType::kI32, {4}, RandomArray(DType::kI32, {4}, 6))};
    EXPECT_TRUE(WriteItem(dir, s, o).ok());
    EXPECT_TRUE(OpenAndReadAll(dir).ok());
    return dir;
  }
};

TEST_F(OrbaxDamageTest, TruncatedBtreeNode) {
  const std::string item = MakeItem("item");
  const std::string d = DataFile(item);
  std::string bytes = Slurp(d);
  Overwrite(d, bytes.substr(0, bytes.size() - 7));  // the node is the last object in the file
  ExpectOneLineError(OpenAndReadAll(item), fs::path(d).filename().string());
  ExpectOneLineError(OpenAndReadAll(item), "lies past the end of the");
}

TEST_F(OrbaxDamageTest, BadNodeCrc) {
  const std::string item = MakeItem("item");
  const std::string d = DataFile(item);
  std::string bytes = Slurp(d);
  bytes[bytes.size() - 20] ^= 0x40;
  Overwrite(d, bytes);
  ExpectOneLineError(OpenAndReadAll(item), "b-tree node fails its CRC-32C check");
}

TEST_F(OrbaxDamageTest, BadManifestCrcAndTruncatedManifest) {
  const std::string item = MakeItem("item");
  std::string m = Slurp(item + "/manifest.ocdbt");
  std::string flipped = m;
  flipped[20] ^= 1;
  Overwrite(item + "/manifest.ocdbt", flipped);
  ExpectOneLineError(OpenAndReadAll(item), "manifest.ocdbt: OCDBT manifest fails its CRC-32C check");
  Overwrite(item + "/manifest.ocdbt", m.substr(0, m.size() / 2));
  ExpectOneLineError(OpenAndReadAll(item), "truncated");
  Overwrite(item + "/manifest.ocdbt", "");
  ExpectOneLineError(OpenAndReadAll(item), "shorter than the 16-byte minimum");
}

// A node whose zstd body is corrupt but whose CRC is right (recomputed), as a buggy writer
// would produce: the zstd decoder's error comes through.
TEST_F(OrbaxDamageTest, WrongZstdFrameInNode) {
  const std::string item = MakeItem("item");
  auto mb = ReadFile(item + "/manifest.ocdbt");
  auto manifest = ocdbt::DecodeManifest(*mb);
  ASSERT_TRUE(manifest.ok());
  const ocdbt::NodeRef& root = manifest->versions.back().root;
  const std::string d = DataFile(item);
  std::string bytes = Slurp(d);
  std::string node = bytes.substr(root.offset, root.length);
  node[14] = 0x11;  // the zstd magic 28 b5 2f fd starts at byte 14
  const uint32_t crc = Crc32c(node.data(), node.size() - 4);
  for (int i = 0; i < 4; ++i) node[node.size() - 4 + i] = char(uint8_t(crc >> (8 * i)));
  bytes.replace(root.offset, root.length, node);
  Overwrite(d, bytes);
  ExpectOneLineError(OpenAndReadAll(item), "b-tree node body: invalid zstd data");
}

TEST_F(OrbaxDamageTest, WrongZstdFrameInChunk) {
  const std::string item = MakeItem("item");
  const std::string d = DataFile(item);
  std::string bytes = Slurp(d);
  bytes[0] ^= 0xff;  // the first out-of-line value (a chunk of "big") starts the file
  Overwrite(d, bytes);
  auto it = Item::Open(item);
  ASSERT_TRUE(it.ok()) << it.message();
  Bytes buf((*it)->Find("big")->nbytes());
  const Status st = (*it)->Read(*(*it)->Find("big"), buf.data());
  ExpectOneLineError(st, "array 'big': shard 'big/c/0' (");
  ExpectOneLineError(st, StrCat(DataFile(item), ") inner chunk 0: invalid zstd data"));
  Bytes small((*it)->Find("small")->nbytes());
  EXPECT_TRUE((*it)->Read(*(*it)->Find("small"), small.data()).ok());  // the others still read
}

TEST_F(OrbaxDamageTest, BadShardIndexCrc) {
  const std::string item = MakeItem("item");
  const std::string d = DataFile(item);
  std::string bytes = Slurp(d);
  auto it = Item::Open(item);
  ASSERT_TRUE(it.ok());
  // "big/c/0" is out of line at offset 0; its index sits at the end of the value.
  FileSet files;
  std::map<std::string, StoredValue> kv;
  ASSERT_TRUE(ocdbt::ReadDatabase(item, &files, &kv).ok());
  const StoredValue& v = kv.at("big/c/0");
  bytes[v.offset + v.length - 10] ^= 1;
  Overwrite(d, bytes);
  it = Item::Open(item);
  ASSERT_TRUE(it.ok());
  Bytes buf(2400);
  ExpectOneLineError((*it)->Read(*(*it)->Find("big"), buf.data()), "shard index fails its crc32c check");
}

TEST_F(OrbaxDamageTest, MissingManifest) {
  const std::string item = MakeItem("item");
  fs::remove(item + "/manifest.ocdbt");
  ExpectOneLineError(OpenAndReadAll(item), "manifest.ocdbt is missing although _METADATA says use_ocdbt");
  fs::remove(item + "/_METADATA");
  ExpectOneLineError(OpenAndReadAll(item), "not an Orbax PyTree item");
}

TEST_F(OrbaxDamageTest, BadJson) {
  const std::string item = MakeItem("item");
  Overwrite(item + "/_METADATA", "{\"tree_metadata\": ");
  ExpectOneLineError(OpenAndReadAll(item), "_METADATA: not valid JSON");
  Overwrite(item + "/_METADATA", "[1, 2]");
  ExpectOneLineError(OpenAndReadAll(item), "_METADATA: must be a JSON object");
  Overwrite(item + "/_METADATA", R"({"use_ocdbt": 1e999})");  // nlohmann throws out_of_range
  ExpectOneLineError(OpenAndReadAll(item), "_METADATA: not valid JSON: number overflow");
  Overwrite(item + "/_METADATA", R"J({"tree_metadata": {"('zz',)": {"key_metadata": [{"key": "zz", "key_type": 2}],
      "value_metadata": {"value_type": "jax.Array", "skip_deserialize": false}}}})J");
  ExpectOneLineError(OpenAndReadAll(item), "_METADATA lists array 'zz' but the item has no zarr array");

  WriteOptions plain;
  plain.ocdbt = false;
  plain.zarr_format = 2;
  const std::string p = MakeItem("plain", plain);
  Overwrite(p + "/big/.zarray", "{\"zarr_format\": 2, \"shape\": [600], ");
  ExpectOneLineError(OpenAndReadAll(p), "array 'big' (big/.zarray): .zarray: not valid JSON");
  Overwrite(p + "/big/.zarray", R"({"zarr_format": 2, "shape": [600], "chunks": [300], "dtype": "<f4", "compressor": {"id": "blosc"}})");
  ExpectOneLineError(OpenAndReadAll(p), "compressor 'blosc' is not supported");

  const std::string root = Path("run");
  ASSERT_TRUE(WriteStep(root, 1, {{"p", {Spec({"a"}, DType::kF32, {1}, Bytes(4))}}}).ok());
  Overwrite(root + "/1/_CHECKPOINT_METADATA", "{not json");
  ExpectOneLineError(OpenStep(root + "/1").status(), "_CHECKPOINT_METADATA: not valid JSON");
}

TEST_F(OrbaxDamageTest, ChunkOfTheWrongSize) {
  WriteOptions raw;
  raw.ocdbt = false;
  raw.zarr_format = 2;
  raw.zstd = false;
  const std::string p = MakeItem("raw", raw);
  std::string chunk = Slurp(p + "/big/1");
  Overwrite(p + "/big/1", chunk.substr(0, chunk.size() - 4));
  ExpectOneLineError(OpenAndReadAll(p), "array 'big': chunk 'big/1' (" + p + "/big/1): the uncompressed chunk is 1196 bytes, expected 1200");

  WriteOptions z;
  z.ocdbt = false;
  z.zarr_format = 2;
  const std::string q = MakeItem("zstd", z);
  const Bytes wrong(1100, 7);
  auto frame = ZstdCompress(wrong.data(), wrong.size(), 1, false);
  ASSERT_TRUE(frame.ok());
  Overwrite(q + "/big/0", *frame);
  ExpectOneLineError(OpenAndReadAll(q), "zstd data decodes to 1100 bytes, expected 1200");
  const Bytes longer(1300, 7);
  frame = ZstdCompress(longer.data(), longer.size(), 1, false);
  Overwrite(q + "/big/0", *frame);
  ExpectOneLineError(OpenAndReadAll(q), "decodes to more than the expected 1200 bytes");
  Overwrite(q + "/big/0", frame->substr(0, frame->size() / 2));
  ExpectOneLineError(OpenAndReadAll(q), "zstd frame is truncated");
}

TEST_F(OrbaxDamageTest, MissingChunk) {
  WriteOptions plain;
  plain.ocdbt = false;
  const std::string p = MakeItem("plain", plain);
  fs::remove(p + "/big/c/1");
  ExpectOneLineError(OpenAndReadAll(p), "chunk 'big/c/1' is missing");
}

TEST_F(OrbaxDamageTest, DataFileOutsideTheDatabaseIsRefused) {
  // A node table pointing at ../x would read outside the item: refused before any I/O.
  ocdbt::BtreeNode node;
  node.files = {ocdbt::DataFile{"../", "secret"}};
  ocdbt::LeafEntry e;
  e.key = "a/.zarray";
  e.out_of_line = true;
  e.file = 0;
  e.offset = 0;
  e.length = 5000;
  node.leaf.push_back(e);
  auto enc = ocdbt::EncodeBtreeNode(node, false, 0);
  ASSERT_TRUE(enc.ok()) << enc.message();
  fs::create_directories(Path("db/d"));
  Overwrite(Path("db/d/node"), *enc);
  ocdbt::Manifest m;
  m.files = {ocdbt::DataFile{"", "d/node"}};
  ocdbt::Version v;
  v.generation = 1;
  v.root = ocdbt::NodeRef{0, 0, enc->size(), {}};
  m.versions.push_back(v);
  auto menc = ocdbt::EncodeManifest(m, true);
  ASSERT_TRUE(menc.ok());
  Overwrite(Path("db/manifest.ocdbt"), *menc);
  ExpectOneLineError(OpenAndReadAll(Path("db")), "data-file path '../secret' leaves the database directory");
}

// An interior node listing one child twice (with different key prefixes) would multiply the
// child's keys; a B+tree never shares nodes, so this is refused.
TEST_F(OrbaxDamageTest, SharedChildNodeIsRefused) {
  ocdbt::BtreeNode leaf;
  ocdbt::LeafEntry e;
  e.key = "x";
  e.value = "v";
  e.length = 1;
  leaf.leaf.push_back(e);
  auto leaf_enc = ocdbt::EncodeBtreeNode(leaf, false, 0);
  ASSERT_TRUE(leaf_enc.ok());
  ocdbt::BtreeNode root;
  root.height = 1;
  root.files = {ocdbt::DataFile{"", "d/n"}};
  for (const char* k : {"a", "b"}) {
    ocdbt::InteriorEntry ie;
    ie.key = k;
    ie.subtree_common_prefix_length = 1;
    ie.child = ocdbt::NodeRef{0, 0, leaf_enc->size(), {}};
    root.interior.push_back(ie);
  }
  auto root_enc = ocdbt::EncodeBtreeNode(root, false, 0);
  ASSERT_TRUE(root_enc.ok());
  fs::create_directories(Path("db/d"));
  Overwrite(Path("db/d/n"), *leaf_enc + *root_enc);
  ocdbt::Manifest m;
  m.files = {ocdbt::DataFile{"", "d/n"}};
  ocdbt::Version v;
  v.generation = 1;
  v.root_height = 1;
  v.root = ocdbt::NodeRef{0, leaf_enc->size(), root_enc->size(), {}};
  m.versions.push_back(v);
  auto menc = ocdbt::EncodeManifest(m, false);
  ASSERT_TRUE(menc.ok());
  Overwrite(Path("db/manifest.ocdbt"), *menc);
  FileSet files;
  std::map<std::string, StoredValue> kv;
  ExpectOneLineError(ocdbt::ReadDatabase(Path("db"), &files, &kv), "the node is referenced twice");
}

// Every single-byte corruption of a small item's files: each Open+Read ends with a status
// (most of them errors), never a crash or a hang.
TEST_F(OrbaxDamageTest, EveryByteFlipEndsCleanly) {
  for (const bool ocdbt : {true, false}) {
    WriteOptions o;
    o.ocdbt = ocdbt;
    const std::string item = MakeItem(ocdbt ? "o" : "p", o);
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(item)) {
      if (e.is_regular_file() && e.file_size() < 4096) files.push_back(e.path().string());
    }
    int errors = 0, total = 0;
    for (const std::string& f : files) {
      const std::string orig = Slurp(f);
      for (size_t i = 0; i < orig.size(); ++i) {
        std::string bad = orig;
        bad[i] = char(bad[i] ^ (1 << (i % 8)));
        Overwrite(f, bad);
        const Status st = OpenAndReadAll(item);
        ++total;
        if (!st.ok()) {
          ++errors;
          EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
        }
      }
      Overwrite(f, orig);
    }
    EXPECT_TRUE(OpenAndReadAll(item).ok());
    // Flips in JSON digits or in unchecksummed zstd chunks may go unnoticed; many are caught.
    EXPECT_GT(errors, total / 8) << errors << " of " << total;
  }
}

}  // namespace
}  // namespace gk::orbax
