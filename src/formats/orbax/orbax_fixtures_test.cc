// Real checkpoints written by Orbax and Tunix (../shared/fixtures/orbax, see its SOURCES.txt):
// every one must load with the values their generators wrote, except the `critical_*`
// alterations, which must fail with a clear one-line error, as they do in Orbax.
//
// orbax-compat: google/orbax experimental/v1/_src/testing/compatibility/generate_v{0,1}_
// checkpoints.py saves the pytree {'a': int32 arange(8), 'b': {'c': int32 [1, 2, 3]}} (item
// `state` in composite checkpoints, the step directory itself in direct ones) and the JSON
// item metadata = {'metadata': 'json_data'}, with custom_metadata {'custom': 'meta'}, then
// deletes one file, directory or _CHECKPOINT_METADATA field per variant.
// tunix-sft: google/tunix tests/sft/test_data/checkpoints/1, the nnx model TestModel (w1 =
// Linear(2, 4), w2 = Linear(4, 2), lecun-normal kernels from Rngs(0), zero biases) saved on a
// 2x2 mesh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "formats/orbax/ocdbt.h"
#include "formats/orbax/orbax.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

#ifndef GK_SOURCE_DIR
#define GK_SOURCE_DIR "."
#endif

namespace gk::orbax {
namespace {

namespace fs = std::filesystem;

std::string FixtureRoot() { return std::string(GK_SOURCE_DIR) + "/../shared/fixtures/orbax"; }

#define REQUIRE_FIXTURES()                                                                    \
  do {                                                                                        \
    if (!fs::exists(FixtureRoot())) {                                                         \
      GTEST_SKIP() << FixtureRoot() << " is absent: the Orbax fixtures live in ../shared "     \
                   << "(not in the repository); run where ../shared/fixtures/orbax exists";   \
    }                                                                                         \
  } while (0)

template <class T>
std::vector<T> ReadAs(const Item& item, const std::string& name) {
  const ArrayInfo* a = item.Find(name);
  EXPECT_NE(a, nullptr) << name;
  if (a == nullptr) return {};
  EXPECT_EQ(a->nbytes() % sizeof(T), 0u);
  std::vector<T> v(a->nbytes() / sizeof(T));
  const Status st = item.Read(*a, v.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return v;
}

// The pytree of the compatibility generators.
void ExpectCompatPytree(const Item& item, int zarr_format, bool has_tree_metadata) {
  ASSERT_EQ(item.arrays().size(), 2u);
  EXPECT_TRUE(item.ocdbt());
  EXPECT_EQ(item.zarr_format(), zarr_format);
  const ArrayInfo* a = item.Find("a");
  const ArrayInfo* bc = item.Find("b.c");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(bc, nullptr);
  EXPECT_EQ(a->dtype, DType::kI32);
  EXPECT_EQ(bc->dtype, DType::kI32);
  EXPECT_EQ(a->shape, std::vector<int64_t>{8});
  EXPECT_EQ(bc->shape, std::vector<int64_t>{3});
  EXPECT_EQ(a->stored_dtype, zarr_format == 2 ? "<i4" : "int32");
  EXPECT_EQ(bc->path, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(bc->key_types, (std::vector<int>{2, 2}));
  EXPECT_EQ(item.tree_metadata().is_null(), !has_tree_metadata);
  EXPECT_EQ(ReadAs<int32_t>(item, "a"), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ReadAs<int32_t>(item, "b.c"), (std::vector<int32_t>{1, 2, 3}));
}

struct Case {
  std::string version, kind, group, variant, dir;
};

std::vector<Case> CompatCases() {
  std::vector<Case> out;
  for (const char* version : {"v0", "v1"}) {
    const fs::path vroot = fs::path(FixtureRoot()) / "orbax-compat" / (std::string(version) + "_checkpoints");
    if (!fs::exists(vroot)) continue;
    for (const auto& kind : fs::directory_iterator(vroot)) {
      for (const auto& group : fs::directory_iterator(kind.path())) {
        for (const auto& variant : fs::directory_iterator(group.path())) {
          out.push_back(Case{version, kind.path().filename().string(), group.path().filename().string(),
                             variant.path().filename().string(), variant.path().string()});
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) { return a.dir < b.dir; });
  return out;
}

bool OneLine(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

// Every compatibility fixture: the non-critical ones load with the generator's values, the
// critical ones fail with a message that says what is wrong.
TEST(OrbaxFixturesTest, EveryCompatibilityCheckpoint) {
  REQUIRE_FIXTURES();
  const std::vector<Case> cases = CompatCases();
  ASSERT_EQ(cases.size(), 44u) << "14 v0 direct + 14 v0 composite + 16 v1 composite variants expected";
  int loaded = 0, refused = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dir);
    auto step = OpenStep(c.dir);
    ASSERT_TRUE(step.ok()) << step.message();
    const bool direct = c.kind == "direct_checkpoint";
    const int zarr_format = c.version == "v0" ? 2 : 3;
    const bool critical = c.group.rfind("critical", 0) == 0;
    EXPECT_EQ(step->v1_layout, c.version == "v1");
    EXPECT_EQ(step->step, -1);  // fixture directories are not named by a step number
    // _CHECKPOINT_METADATA: every field is non-critical.
    if (c.group == "checkpoint_metadata_missing") {
      EXPECT_TRUE(step->checkpoint_metadata.is_null());
    } else {
      ASSERT_TRUE(step->checkpoint_metadata.is_object());
      // missing_<field>_metadata removed that field of _CHECKPOINT_METADATA.
      std::string removed;
      if (c.group == "non_critical_metadata_alterations" && c.variant.rfind("missing_pytree_data", 0) != 0) {
        removed = c.variant.substr(8, c.variant.size() - 8 - 9);
        EXPECT_FALSE(step->checkpoint_metadata.contains(removed)) << removed;
      }
      if (removed != "custom_metadata") {
        EXPECT_EQ(step->checkpoint_metadata["custom_metadata"], (nlohmann::json{{"custom", "meta"}}));
      }
    }
    if (direct) {
      EXPECT_EQ(step->items, std::vector<std::string>{"."});
    } else if (c.variant != "deleted_checkpointable") {
      auto meta = ReadJsonItem(step->ItemDir("metadata"));
      ASSERT_TRUE(meta.ok()) << meta.message();
      EXPECT_EQ(*meta, (nlohmann::json{{"metadata", "json_data"}}));
    }
    if (c.variant == "deleted_checkpointable") {
      // The state item was deleted: a non-critical alteration, nothing PyTree is left.
      EXPECT_EQ(step->items, std::vector<std::string>{"metadata"});
      EXPECT_TRUE(step->pytree_items.empty());
      ++loaded;
      continue;
    }
    std::string first_error;
    for (const std::string& it : step->pytree_items) {
      auto item = Item::Open(step->ItemDir(it));
      if (!item.ok()) {
        if (first_error.empty()) first_error = item.message();
        continue;
      }
      ASSERT_EQ(it, direct ? "." : "state");
      ExpectCompatPytree(**item, zarr_format, c.group.find("pytree_checkpointable_missing_metadata") == std::string::npos &&
                                                   c.variant != "pytree_checkpointable_missing_metadata");
    }
    if (!critical) {
      EXPECT_TRUE(first_error.empty()) << first_error;
      EXPECT_EQ(step->pytree_items, std::vector<std::string>{direct ? "." : "state"});
      ++loaded;
      continue;
    }
    ++refused;
    EXPECT_TRUE(OneLine(first_error)) << "critical alteration loaded, or a multi-line error: " << first_error;
    if (c.variant == "missing_pytree_data_dir_d") {
      EXPECT_NE(first_error.find("/d/"), std::string::npos) << first_error;
      EXPECT_NE(first_error.find("cannot open: No such file or directory"), std::string::npos) << first_error;
    } else if (c.variant == "missing_pytree_data_file_manifest.ocdbt") {
      EXPECT_NE(first_error.find("manifest.ocdbt is missing"), std::string::npos) << first_error;
      EXPECT_NE(first_error.find("never merged"), std::string::npos) << first_error;
    } else if (c.variant == "dummy_checkpointable_added") {
      EXPECT_NE(first_error.find("dummy/_METADATA: not valid JSON"), std::string::npos) << first_error;
    } else {
      ADD_FAILURE() << "unexpected critical variant " << c.variant;
    }
    std::printf("[ refused  ] %s/%s/%s: %s\n", c.version.c_str(), c.kind.c_str(), c.variant.c_str(),
                first_error.c_str());
  }
  EXPECT_EQ(loaded, 37);
  EXPECT_EQ(refused, 7);  // 2 + 2 + 3 critical variants
}

// The critical alteration that removed the root manifest left the per-process database
// intact: read on request, it holds the same pytree (and shows reading several generations).
TEST(OrbaxFixturesTest, UnmergedProcessDatabasesOnRequest) {
  REQUIRE_FIXTURES();
  for (const char* rel : {"v0_checkpoints/direct_checkpoint/critical_metadata_alterations/missing_pytree_data_file_manifest.ocdbt",
                          "v0_checkpoints/composite_checkpoint/critical_metadata_alterations/missing_pytree_data_file_manifest.ocdbt/state",
                          "v1_checkpoints/composite_checkpoint/critical_metadata_alterations/missing_pytree_data_file_manifest.ocdbt/state"}) {
    SCOPED_TRACE(rel);
    const std::string dir = FixtureRoot() + "/orbax-compat/" + rel;
    EXPECT_FALSE(Item::Open(dir).ok());
    OpenOptions o;
    o.read_unmerged_process_databases = true;
    auto item = Item::Open(dir, o);
    ASSERT_TRUE(item.ok()) << item.message();
    ExpectCompatPytree(**item, std::string(rel).rfind("v0", 0) == 0 ? 2 : 3, true);
  }
}

// The merged root database and the per-process one it points into hold the same keys.
TEST(OrbaxFixturesTest, RootAndProcessDatabasesAgree) {
  REQUIRE_FIXTURES();
  const std::string dir = FixtureRoot() +
                          "/orbax-compat/v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/"
                          "pytree_checkpointable_has_metadata/state";
  FileSet f1, f2;
  std::map<std::string, StoredValue> root, proc;
  ASSERT_TRUE(ocdbt::ReadDatabase(dir, &f1, &root).ok());
  ASSERT_TRUE(ocdbt::ReadDatabase(dir + "/ocdbt.process_0", &f2, &proc).ok());
  ASSERT_EQ(root.size(), 4u);
  ASSERT_EQ(proc.size(), root.size());
  for (const auto& [k, v] : root) {
    ASSERT_TRUE(proc.count(k)) << k;
    EXPECT_EQ(v.inline_bytes, proc[k].inline_bytes) << k;
  }
  EXPECT_TRUE(root.count("a/zarr.json") && root.count("a/c/0") && root.count("b.c/c/0"));
}

TEST(OrbaxFixturesTest, TunixSftStep) {
  REQUIRE_FIXTURES();
  const std::string root = FixtureRoot() + "/tunix-sft";
  auto steps = ListSteps(root);
  ASSERT_TRUE(steps.ok()) << steps.message();
  EXPECT_EQ(*steps, std::vector<int64_t>{1});
  auto dir = StepDir(root, 1);
  ASSERT_TRUE(dir.ok()) << dir.message();
  auto step = OpenStep(*dir);
  ASSERT_TRUE(step.ok()) << step.message();
  EXPECT_EQ(step->step, 1);
  EXPECT_EQ(step->items, std::vector<std::string>{"model_params"});
  EXPECT_EQ(step->pytree_items, std::vector<std::string>{"model_params"});
  EXPECT_FALSE(step->v1_layout);
  EXPECT_EQ(step->checkpoint_metadata["custom_metadata"], nlohmann::json::object());
  auto item = Item::Open(step->ItemDir("model_params"));
  ASSERT_TRUE(item.ok()) << item.message();
  EXPECT_TRUE((*item)->ocdbt());
  EXPECT_EQ((*item)->zarr_format(), 2);
  EXPECT_FALSE((*item)->tree_metadata().contains("use_ocdbt"));  // older _METADATA: inferred
  struct Want {
    const char* name;
    std::vector<int64_t> shape, chunks;
  };
  const Want want[] = {{"w1.bias.value", {4}, {1}},
                       {"w1.kernel.value", {2, 4}, {1, 2}},
                       {"w2.bias.value", {2}, {2}},
                       {"w2.kernel.value", {4, 2}, {2, 1}}};
  ASSERT_EQ((*item)->arrays().size(), 4u);
  for (const Want& w : want) {
    SCOPED_TRACE(w.name);
    const ArrayInfo* a = (*item)->Find(w.name);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dtype, DType::kF32);
    EXPECT_EQ(a->stored_dtype, "<f4");
    EXPECT_EQ(a->shape, w.shape);
    EXPECT_EQ(a->chunk_shape, w.chunks);
    EXPECT_EQ(a->path.back(), "value");
    EXPECT_EQ(a->path.size(), 3u);
    const std::vector<float> v = ReadAs<float>(**item, w.name);
    ASSERT_EQ(int64_t(v.size()), a->numel());
    if (std::string(w.name).find("bias") != std::string::npos) {
      for (float x : v) EXPECT_EQ(x, 0.0f);  // nnx.Linear biases start at zero
    } else {
      // lecun_normal: truncated normal with std 1/sqrt(fan_in); distinct, finite, bounded.
      const double fan_in = double(w.shape[0]);
      std::set<float> distinct(v.begin(), v.end());
      EXPECT_EQ(distinct.size(), v.size());
      for (float x : v) {
        EXPECT_TRUE(std::isfinite(x));
        EXPECT_LT(std::fabs(x), 2.5 / std::sqrt(fan_in));
        EXPECT_NE(x, 0.0f);
      }
    }
  }
}

// Our zarr metadata for the fixtures' arrays is byte-identical to TensorStore's, and our
// writer re-encodes them into the same keys and values.
TEST(OrbaxFixturesTest, ReencodedFixtureMatchesTensorStore) {
  REQUIRE_FIXTURES();
  const std::string base = FixtureRoot() + "/orbax-compat/";
  for (int format : {2, 3}) {
    SCOPED_TRACE(format);
    const std::string dir = base + (format == 2 ? "v0_checkpoints/composite_checkpoint" : "v1_checkpoints/composite_checkpoint") +
                            "/checkpoint_metadata_present/pytree_checkpointable_has_metadata/state";
    auto item = Item::Open(dir);
    ASSERT_TRUE(item.ok()) << item.message();
    std::vector<ArraySpec> specs;
    for (const ArrayInfo& a : (*item)->arrays()) {
      ArraySpec s;
      s.path = a.path;
      s.dtype = a.dtype;
      s.shape = a.shape;
      s.chunk_shape = a.chunk_shape;
      const Item* it = item->get();
      const ArrayInfo* ap = &a;
      s.fill = [it, ap](uint8_t* dst, size_t) { return it->Read(*ap, dst); };
      specs.push_back(std::move(s));
    }
    const std::string out = TestTempDir(StrCat("gk_orbax_reencode", format));
    WriteOptions o;
    o.zarr_format = format;
    ASSERT_TRUE(WriteItem(out, specs, o).ok());
    FileSet fa, fb;
    std::map<std::string, StoredValue> theirs, ours;
    ASSERT_TRUE(ocdbt::ReadDatabase(dir, &fa, &theirs).ok());
    ASSERT_TRUE(ocdbt::ReadDatabase(out, &fb, &ours).ok());
    ASSERT_EQ(theirs.size(), ours.size());
    for (const auto& [k, v] : theirs) {
      SCOPED_TRACE(k);
      ASSERT_TRUE(ours.count(k));
      // Metadata byte for byte; chunks: same zstd level, so the same frames.
      EXPECT_EQ(ours[k].inline_bytes, v.inline_bytes);
    }
    // All values are inline, so the data file holds just the leaf node: byte for byte what
    // TensorStore wrote (same keys, values, column layout and zstd frame).
    const auto only_file = [](const std::string& d) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(d)) files.push_back(e.path());
      EXPECT_EQ(files.size(), 1u) << d;
      auto text = ReadFile(files.at(0).string());
      return text.ok() ? *text : std::string();
    };
    EXPECT_EQ(only_file(out + "/d"), only_file(dir + "/d"));
    // The manifests differ only in the uuid, the data-file name and the commit time.
    auto theirs_m = ReadFile(dir + "/manifest.ocdbt");
    auto ours_m = ReadFile(out + "/manifest.ocdbt");
    ASSERT_TRUE(theirs_m.ok() && ours_m.ok());
    EXPECT_EQ(ours_m->size(), theirs_m->size());
    auto tm = ocdbt::DecodeManifest(*theirs_m);
    auto om = ocdbt::DecodeManifest(*ours_m);
    ASSERT_TRUE(tm.ok() && om.ok());
    EXPECT_EQ(om->config.max_inline_value_bytes, tm->config.max_inline_value_bytes);
    EXPECT_EQ(om->config.max_decoded_node_bytes, tm->config.max_decoded_node_bytes);
    EXPECT_EQ(om->config.version_tree_arity_log2, tm->config.version_tree_arity_log2);
    EXPECT_EQ(om->config.compression, tm->config.compression);
    EXPECT_EQ(om->config.zstd_level, tm->config.zstd_level);
    ASSERT_EQ(om->files.size(), 1u);
    EXPECT_EQ(om->files[0].relative_path.size(), tm->files[0].relative_path.size());
    ASSERT_EQ(om->versions.size(), 1u);
    const ocdbt::Version& ov = om->versions[0];
    const ocdbt::Version& tv = tm->versions[0];
    EXPECT_EQ(ov.generation, tv.generation);
    EXPECT_EQ(ov.root_height, tv.root_height);
    EXPECT_EQ(ov.root.offset, tv.root.offset);
    EXPECT_EQ(ov.root.length, tv.root.length);
    EXPECT_EQ(ov.root.stats.num_keys, tv.root.stats.num_keys);
    EXPECT_EQ(ov.root.stats.num_tree_bytes, tv.root.stats.num_tree_bytes);
    EXPECT_EQ(ov.root.stats.num_indirect_value_bytes, tv.root.stats.num_indirect_value_bytes);
    EXPECT_TRUE(om->version_nodes.empty());
    auto back = Item::Open(out);
    ASSERT_TRUE(back.ok()) << back.message();
    ExpectCompatPytree(**back, format, true);
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace gk::orbax
