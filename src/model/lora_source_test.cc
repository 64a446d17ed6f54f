#include "model/lora_source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/test_temp_dir.h"

namespace gk {
namespace {

// The adapter of `gemmakit merge` comes from outside: malformed ones are one-line errors, not
// exceptions (nlohmann's value() threw on a non-string peft_type) or a division by a zero rank.
TEST(PeftLoraSource, MalformedConfigsAreErrors) {
  const std::string dir = TestTempDir("gk_peft_lora_source");
  std::filesystem::create_directories(dir);
  const auto open_error = [&](const std::string& config) {
    std::ofstream(dir + "/adapter_config.json") << config;
    auto s = OpenPeftLoraSource(dir);
    EXPECT_FALSE(s.ok()) << config;
    EXPECT_EQ(s.ok() ? std::string::npos : s.message().find('\n'), std::string::npos);
    return s.ok() ? std::string() : s.message();
  };
  EXPECT_NE(open_error(R"({"r": 2, "lora_alpha": 1e999})").find("not valid JSON: number overflow"), std::string::npos);
  EXPECT_NE(open_error(R"({"r": 2, "lora_alpha": 4, "peft_type": ["LORA"]})").find("not a LoRA adapter"),
            std::string::npos);
  EXPECT_NE(open_error(R"({"r": 0, "lora_alpha": 4})").find("needs integer \"r\" >= 1"), std::string::npos);
  EXPECT_NE(open_error(R"({"r": 2, "lora_alpha": 4, "use_rslora": "no"})").find("adapter_model.safetensors"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gk
