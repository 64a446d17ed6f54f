#include "engines/serve/lora_registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "model/toy_models_test_util.h"
#include "model/weights.h"

namespace gk {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  ModelConfig config = ToyConfig("tiny", 6);
  std::string base, work, prefix;
  Fixture() {
    base = WriteToyModel(config, "gk_lora_registry_base", DType::kF32, 3);
    work = TestTempDir("gk_lora_registry_work");
    fs::remove_all(work);
    auto w = LoadWeights(base, config);
    EXPECT_TRUE(w.ok());
    prefix = w->prefix;
    for (int rank : {2, 4, 32}) {
      LoraOptions o;
      o.rank = rank;
      auto a = LoraAdapter::Create(config, prefix, o);
      EXPECT_TRUE(a.ok());
      a->InitPeft(uint64_t(rank));
      EXPECT_TRUE(a->SavePeft(StrCat(work, "/root/r", rank), base).ok());
    }
  }
  ~Fixture() {
    fs::remove_all(work);
    fs::remove_all(base);
  }
  LoraRegistry Registry(int max_cpu_loras) {
    LoraRegistryOptions o;
    o.max_cpu_loras = max_cpu_loras;
    o.max_lora_rank = 16;
    o.root = work + "/root";
    return LoraRegistry(base, config, prefix, o);
  }
};

TEST(LoraRegistry, EvictsTheLeastRecentlyUsedAdapterNoRequestHolds) {
  Fixture f;
  LoraRegistry r = f.Registry(1);
  ASSERT_TRUE(r.Add("a", {f.work + "/root/r2", 0}, false).ok());
  ASSERT_TRUE(r.Add("b", {f.work + "/root/r4", 0}, false).ok());
  EXPECT_EQ(r.loaded(), 1);  // a was dropped for b
  auto a = r.Acquire("a");   // read again
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->weights->rank(), 2);
  EXPECT_EQ(r.loaded(), 1);
  auto b = r.Acquire("b");   // a is held: both stay, over the limit
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(r.loaded(), 2);
  EXPECT_NE(a->id, b->id);
  a->weights.reset();
  ASSERT_TRUE(r.Acquire("b").ok());
  EXPECT_EQ(r.loaded(), 1);  // a, no longer held, was dropped
  // Many requests for an evicted adapter at once: one read, the same weights for all.
  b->weights.reset();
  ASSERT_TRUE(r.Acquire("a").ok());
  std::vector<std::shared_ptr<const LoraWeights>> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto x = r.Acquire("b");
      if (x.ok()) got[size_t(i)] = x->weights;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, got[0]);
  EXPECT_NE(got[0], nullptr);
}

TEST(LoraRegistry, RemoveKeepsRunningWeightsAndANewAddGetsANewId) {
  Fixture f;
  LoraRegistry r = f.Registry(4);
  ASSERT_TRUE(r.Add("a", {f.work + "/root/r2", 0}, false).ok());
  auto held = r.Acquire("a");
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(r.Remove("a"));
  EXPECT_FALSE(r.Remove("a"));
  EXPECT_FALSE(r.Has("a"));
  EXPECT_EQ(held->weights->rank(), 2);  // a request running through it keeps it
  auto gone = r.Acquire("a");
  EXPECT_FALSE(gone.ok());
  EXPECT_EQ(gone.message(), "The model `a` does not exist.");
  ASSERT_TRUE(r.Add("a", {f.work + "/root/r4", 0}, false).ok());
  auto again = r.Acquire("a");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->id, held->id);  // fresh prefix-cache keys
  EXPECT_EQ(again->weights->rank(), 4);
  EXPECT_NE(r.Add("a", {f.work + "/root/r4", 0}, false).message().find("has already been loaded"), std::string::npos);
  ASSERT_EQ(r.List().size(), 1u);
  EXPECT_EQ(r.List()[0].path, f.work + "/root/r4");
}

TEST(LoraRegistry, ConfinedPathsStayUnderTheRoot) {
  Fixture f;
  LoraRegistry r = f.Registry(4);
  EXPECT_TRUE(r.Add("rel", {"r2", 0}, true).ok());  // relative: from the root
  EXPECT_EQ(r.List()[0].path, fs::weakly_canonical(f.work + "/root/r2").string());
  fs::create_directories(f.work + "/outside");
  fs::copy(f.work + "/root/r2", f.work + "/outside/r2");
  for (const std::string& p : {f.work + "/outside/r2", std::string("../outside/r2"), std::string("r2/../../outside/r2")}) {
    const Status s = r.Add("x", {p, 0}, true);
    EXPECT_NE(s.message().find("is outside --lora-root"), std::string::npos) << p << ": " << s.message();
  }
  fs::create_directory_symlink(f.work + "/outside", f.work + "/root/link");
  EXPECT_NE(r.Add("x", {"link/r2", 0}, true).message().find("outside --lora-root"), std::string::npos);
  EXPECT_TRUE(r.Add("x", {f.work + "/outside/r2", 0}, false).ok());  // start-up flags are not confined
  EXPECT_NE(r.Add("big", {"r32", 0}, true).message().find("rank 32 is above --max-lora-rank 16"), std::string::npos);
}

}  // namespace
}  // namespace gk
