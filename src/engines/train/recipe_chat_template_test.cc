// data.chat_template: parsed from the TOML and --set, written by ToJson (so training_run.json and
// the resume fingerprint carry it), and checked: a path must be a file, and the template's text
// pasted in place of its file is refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "engines/train/recipe.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::train {
namespace {

const char kRecipe[] = R"(
model = "/m"
out = "/o"
[data]
path = "/d.jsonl"
chat_template = "tool_use"
)";

TEST(RecipeChatTemplate, ParsedSetAndWritten) {
  auto r = ParseRecipe(kRecipe, "r.toml");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->chat_template, "tool_use");  // a name from the checkpoint's list
  EXPECT_TRUE(ValidateRecipe(*r).ok()) << ValidateRecipe(*r).message();
  EXPECT_EQ(r->ToJson()["data"]["chat_template"], "tool_use");

  const std::string dir = TestTempDir("gk_recipe_chat_template");
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/mine.jinja";
  ASSERT_TRUE(WriteFileAtomic(file, "{{ messages[0].content }}").ok());
  ASSERT_TRUE(ApplyOverrides(*r, {"data.chat_template=" + file}).ok());
  EXPECT_EQ(r->chat_template, file);
  EXPECT_TRUE(ValidateRecipe(*r).ok()) << ValidateRecipe(*r).message();

  TrainRecipe defaults;
  EXPECT_EQ(defaults.chat_template, "");  // the checkpoint's template, else the built-in one
  EXPECT_EQ(defaults.ToJson()["data"]["chat_template"], "");
  std::filesystem::remove_all(dir);
}

TEST(RecipeChatTemplate, AMissingFileOrTemplateTextIsRefused) {
  auto r = ParseRecipe(kRecipe, "r.toml");
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_TRUE(ApplyOverrides(*r, {"data.chat_template=/nonexistent/t.jinja"}).ok());
  Status s = ValidateRecipe(*r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("data.chat_template: no such file \"/nonexistent/t.jinja\""), std::string::npos)
      << s.message();
  ASSERT_TRUE(ApplyOverrides(*r, {"data.chat_template=nope.jinja"}).ok());  // a .jinja name is a path too
  EXPECT_FALSE(ValidateRecipe(*r).ok());

  r->chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  s = ValidateRecipe(*r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not its text"), std::string::npos) << s.message();

  auto typo = ParseRecipe("[data]\nchat_templates = \"x\"\n", "typo.toml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.message().find("did you mean \"data.chat_template\""), std::string::npos) << typo.message();
}

}  // namespace
}  // namespace gk::train
