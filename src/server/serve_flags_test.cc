#include "server/serve_flags.h"

#include <gtest/gtest.h>

#include "server/model_registry.h"

namespace gk::server {
namespace {

TEST(ServeFlagsTest, ByteSizes) {
  EXPECT_EQ(ParseByteSize("1024").value(), 1024u);
  EXPECT_EQ(ParseByteSize("2GiB").value(), uint64_t(2) << 30);
  EXPECT_EQ(ParseByteSize("512MiB").value(), uint64_t(512) << 20);
  EXPECT_EQ(ParseByteSize("512mib").value(), uint64_t(512) << 20);
  EXPECT_EQ(ParseByteSize("1.5G").value(), uint64_t(3) << 29);
  EXPECT_EQ(ParseByteSize("64k").value(), 65536u);
  EXPECT_EQ(ParseByteSize("800MB").value(), 800000000u);
  EXPECT_EQ(ParseByteSize("1 TiB").value(), uint64_t(1) << 40);
  EXPECT_EQ(ParseByteSize("7B").value(), 7u);
  for (const char* bad : {"", "GiB", "-1G", "1X", "1GiBB", "1.2.3", "abc", "99999999999T"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
  EXPECT_NE(ParseByteSize("1X").message().find("not a byte size"), std::string::npos);
}

TEST(ServeFlagsTest, KvCacheDTypes) {
  EXPECT_EQ(ParseKvCacheDType("auto").value(), DType::kUnknown);
  EXPECT_EQ(ParseKvCacheDType("bf16").value(), DType::kBF16);
  EXPECT_EQ(ParseKvCacheDType("f16").value(), DType::kF16);
  EXPECT_EQ(ParseKvCacheDType("fp8").value(), DType::kFp8E4m3);
  EXPECT_EQ(ParseKvCacheDType("fp8_e4m3").value(), DType::kFp8E4m3);
  EXPECT_EQ(ParseKvCacheDType("fp8_e5m2").value(), DType::kFp8E5m2);
  EXPECT_FALSE(ParseKvCacheDType("int4").ok());
}

TEST(ServeFlagsTest, Memory) {
  EXPECT_GT(PhysicalMemoryBytes(), uint64_t(1) << 20);
  EXPECT_GT(ResidentBytes(), 0u);
}

TEST(ModelRegistryTest, NamesAndAdapters) {
  ModelRegistry r({"gemma", "alias"}, "/models/g", 4096, 1);
  EXPECT_EQ(r.base_name(), "gemma");
  EXPECT_EQ(r.Resolve("")->name, "gemma");  // no "model": the base
  EXPECT_EQ(r.Resolve("alias")->name, "alias");
  EXPECT_FALSE(r.Resolve("alias")->adapter);
  EXPECT_FALSE(r.Resolve("other"));
  EXPECT_EQ(r.Cards().size(), 2u);
  auto spec = ParseLoraSpec("sql=/adapters/sql:alpha=64");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->name, "sql");
  EXPECT_EQ(spec->dir, "/adapters/sql:alpha=64");
  spec = ParseLoraSpec(R"({"name": "sql", "path": "/adapters/sql", "base_model_name": "gemma"})");
  ASSERT_TRUE(spec.ok()) << spec.message();
  EXPECT_EQ(spec->dir, "/adapters/sql");
  EXPECT_FALSE(ParseLoraSpec(R"({"name": "sql"})").ok());
  EXPECT_FALSE(ParseLoraSpec("noequals").ok());
  EXPECT_FALSE(ParseLoraSpec("=dir").ok());
  ModelRegistry d({}, "/models/g", 10, 1);
  EXPECT_EQ(d.base_name(), "/models/g");  // vLLM's default: the --model path
}

}  // namespace
}  // namespace gk::server
