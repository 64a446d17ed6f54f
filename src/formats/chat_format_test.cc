// Which template a model's chats use: an override file or name, the checkpoint's, the built-in.
#include "formats/chat_format.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "formats/chat_template.h"
#include "formats/gemma4_tokens.h"
#include "formats/layout_tokenizer_test_util.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk {
namespace {

using Json = nlohmann::ordered_json;

TEST(ChatFormatTest, OverrideThenCheckpointThenBuiltin) {
  const std::string dir = TestTempDir("chat_format");
  std::filesystem::create_directories(dir);
  const Tokenizer tok = LayoutTokenizer(/*gemma4_names=*/true);
  ChatRenderInput in;
  in.messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});

  auto builtin = ChatFormat::ForModel(dir, BuiltinChat::kGemma4);
  ASSERT_TRUE(builtin.ok()) << builtin.message();
  EXPECT_TRUE(builtin->builtin());
  EXPECT_EQ(builtin->Describe(), "built-in Gemma 4 template");
  EXPECT_EQ(*builtin->Apply(tok, in), *ApplyGemma4ChatTemplate(tok, {{"user", "Hi"}}));
  in.kwargs = {{"enable_thinking", true}};
  EXPECT_EQ(*builtin->Apply(tok, in), *ApplyGemma4ChatTemplate(tok, {{"user", "Hi"}}, {.enable_thinking = true}));
  in.tools = Json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  EXPECT_FALSE(builtin->Apply(tok, in).ok());  // the built-in renderer has no tools: said, not ignored
  in.tools = nullptr;

  // The template `gemmakit init` writes gives the built-in renderer's ids.
  auto config = RenameToGemma4TokenizerConfig(R"({"chat_template": "x", "bos_token": "<bos>"})");
  ASSERT_TRUE(config.ok()) << config.message();
  ASSERT_TRUE(WriteFileAtomic(dir + "/tokenizer_config.json", *config).ok());
  auto checkpoint = ChatFormat::ForModel(dir, BuiltinChat::kGemma4);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.message();
  EXPECT_FALSE(checkpoint->builtin());
  EXPECT_EQ(checkpoint->Describe(), dir + "/tokenizer_config.json");
  EXPECT_EQ(*checkpoint->Apply(tok, in), *builtin->Apply(tok, in));

  ASSERT_TRUE(WriteFileAtomic(dir + "/mine.jinja", "{{ bos_token }}{{ messages[0].content }}").ok());
  auto file = ChatFormat::ForModel(dir, BuiltinChat::kGemma4, dir + "/mine.jinja");
  ASSERT_TRUE(file.ok()) << file.message();
  std::vector<int32_t> want = {2};
  for (int32_t id : tok.Encode("Hi")) want.push_back(id);
  EXPECT_EQ(*file->Apply(tok, in), want);

  auto missing = ChatFormat::ForModel(dir, BuiltinChat::kGemma4, dir + "/none.jinja");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no such file"), std::string::npos) << missing.message();
  EXPECT_FALSE(ChatFormat::ForModel(dir, BuiltinChat::kGemma4, "tool_use").ok());  // no such named template
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gk
