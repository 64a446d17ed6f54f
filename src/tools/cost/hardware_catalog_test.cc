#include "tools/cost/hardware_catalog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gk::cost {
namespace {

TEST(CostCatalog, BuiltInHasTheReferenceMachines) {
  auto cat = HardwareCatalog::Default();
  ASSERT_TRUE(cat.ok()) << cat.message();
  struct Want {
    const char* name;
    const char* chip;
    int chips;
    double price;
  };
  for (const Want& w : {Want{"tpu-v5p-8", "tpu-v5p", 4, 16.80}, Want{"tpu-v6e-8", "tpu-v6e", 8, 21.52},
                        Want{"a3-highgpu-2g", "h100", 2, 22.12}}) {
    auto m = cat->Find(w.name);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ(m->chip.name, w.chip);
    EXPECT_EQ(m->chips, w.chips);
    EXPECT_DOUBLE_EQ(m->price_per_hour, w.price);
  }
  for (const char* chip : {"h100", "h200", "tpu-v5p", "tpu-v6e"}) {
    auto m = cat->Find(chip);
    ASSERT_TRUE(m.ok()) << chip;
    EXPECT_EQ(m->chips, 1);
    EXPECT_GT(m->chip.bf16_tflops, 0);
  }
  EXPECT_DOUBLE_EQ(cat->Find("h100")->chip.memory_bandwidth_gb_s, 3350);
  EXPECT_DOUBLE_EQ(cat->Find("tpu-v5p")->chip.memory_bandwidth_gb_s, 2765);
}

TEST(CostCatalog, EmbeddedCopyEqualsTheDataFile) {
  const std::string path = std::string(GK_SOURCE_DIR) + "/data/hardware.toml";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), HardwareCatalog::DefaultText()) << "re-run cmake: the built-in catalog is stale";
}

TEST(CostCatalog, UnknownNameListsTheKnownOnes) {
  auto cat = HardwareCatalog::Default();
  auto m = cat->Find("tpu-v9");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("unknown hardware 'tpu-v9'"), std::string::npos);
  EXPECT_NE(m.message().find("a3-highgpu-2g, tpu-v5p-8, tpu-v6e-8, h100, h200, tpu-v5p, tpu-v6e, cpu"), std::string::npos)
      << m.message();
}

TEST(CostCatalog, BadFilesNameTheProblem) {
  EXPECT_NE(HardwareCatalog::Parse("[chips.x\n", "f.toml").message().find("f.toml:1"), std::string::npos);
  EXPECT_NE(HardwareCatalog::Parse("[chips.x]\nmemory_gib = 1\n", "f.toml").message().find("missing field 'memory_bandwidth_gb_s'"),
            std::string::npos);
  const std::string chip = "[chips.x]\nmemory_gib = 1\nmemory_bandwidth_gb_s = 1\nbf16_tflops = 1\n";
  EXPECT_TRUE(HardwareCatalog::Parse(chip, "f.toml").ok());
  EXPECT_NE(HardwareCatalog::Parse(chip + "[machines.m]\nchip = \"y\"\nchips = 2\nprice_per_hour = 1\n", "f.toml")
                .message()
                .find("'y' is not a [chips.NAME] entry"),
            std::string::npos);
  EXPECT_NE(HardwareCatalog::Parse(chip + "[machines.m]\nchip = \"x\"\nchips = 0\nprice_per_hour = 1\n", "f.toml")
                .message()
                .find("chips: expected an integer >= 1"),
            std::string::npos);
  EXPECT_FALSE(HardwareCatalog::Load("/nonexistent/hw.toml").ok());
}

}  // namespace
}  // namespace gk::cost
