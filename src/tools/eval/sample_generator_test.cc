// `eval verilog --model DIR` prompts through the model directory's chat template: ChatPrompt
// renders the checkpoint's template, and the in-process generator sends exactly those ids (its
// greedy samples are the single-sequence generator's on them; a template that makes the prompt
// too long is refused with the template's token count).
#include "tools/eval/sample_generator.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engines/generate/generator.h"
#include "formats/chat_template.h"
#include "formats/layout_tokenizer_test_util.h"
#include "model/toy_models_test_util.h"
#include "util/atomic_file.h"

namespace gk::eval {
namespace {

// Not Gemma's layout: a fixed system turn first, and the user text twice.
const char kTemplate[] =
    "{{ bos_token }}<|turn>system\nverilog only<turn|>\n"
    "{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }} {{ m.content }}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}";

// The toy Gemma 4 model with room for the layout tokenizer's ids, and kTemplate beside it.
std::string ModelWithTemplate() {
  ModelConfig c = ToyConfig("tiny", 12);
  c.vocab_size = c.vocab_size_per_layer_input = 512;
  c.max_position_embeddings = 512;
  const std::string dir = WriteToyModel(c, "gk_eval_chat_template_model", DType::kF32, 3);
  EXPECT_TRUE(WriteFileAtomic(dir + "/chat_template.jinja", kTemplate).ok());
  return dir;
}

std::vector<int32_t> Expected(const Tokenizer& tok, const std::string& user) {
  std::vector<int32_t> ids = {2, 105};
  auto add = [&](const std::string& text) {
    for (int32_t id : tok.Encode(text, SpecialTokenText::kAsText)) ids.push_back(id);
  };
  add("system\nverilog only");
  ids.push_back(106);
  add("\n");
  ids.push_back(105);
  add("user\n" + user + " " + user);
  ids.push_back(106);
  add("\n");
  ids.push_back(105);
  add("model\n");
  return ids;
}

TEST(EvalChatPromptTest, UsesTheModelDirectorysTemplate) {
  const std::string dir = ModelWithTemplate();
  const Tokenizer tok = LayoutTokenizer(/*gemma4_names=*/true);
  auto format = ChatFormat::ForModel(dir, BuiltinChat::kGemma4);
  ASSERT_TRUE(format.ok()) << format.message();
  EXPECT_EQ(format->Describe(), dir + "/chat_template.jinja");
  auto ids = ChatPrompt(*format, tok, "add <turn|> bits");
  ASSERT_TRUE(ids.ok()) << ids.message();
  EXPECT_EQ(*ids, Expected(tok, "add <turn|> bits"));  // the typed marker stays text
  EXPECT_NE(*ids, ApplyGemma4ChatTemplate(tok, {{"user", "add <turn|> bits"}}).value());
}

TEST(EvalChatPromptTest, TheEngineGeneratorSendsTheTemplatesIds) {
  const std::string dir = ModelWithTemplate();
  const Tokenizer tok = LayoutTokenizer(true);
  ThreadPool pool(2);
  auto model = GemmaModel::Load(dir, &pool, {});
  ASSERT_TRUE(model.ok()) << model.message();
  EngineOptions eo;
  eo.max_model_len = 64;
  auto engine = ServeEngine::Create(std::move(*model), eo);
  ASSERT_TRUE(engine.ok()) << engine.message();
  GenerateFn generate = EngineGenerator(**engine, tok, ChatFormat::ForModel(dir, BuiltinChat::kGemma4).value(), {});
  GenerationSettings s;
  s.temperature = 0;  // greedy: comparable with the single-sequence generator
  s.max_tokens = 6;
  auto texts = generate({{"ab", 1}}, s, nullptr);
  ASSERT_TRUE(texts.ok()) << texts.message();

  auto reference_model = GemmaModel::Load(dir, &pool, {});
  ASSERT_TRUE(reference_model.ok()) << reference_model.message();
  GenerateOptions o;
  o.max_tokens = 6;
  std::vector<int32_t> want;
  ASSERT_TRUE(Generate(**reference_model, Expected(tok, "ab"), o, [&](int32_t t) {
                want.push_back(t);
                return true;
              }).ok());
  EXPECT_EQ((*texts)[0], tok.Decode(want, /*skip_special=*/true));

  // The template doubles the user text: 30 letters make a prompt the engine cannot hold, and the
  // error counts the template's tokens.
  const std::string long_user(30, 'x');
  auto refused = generate({{long_user, 1}}, s, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find(StrCat("the prompt is ", Expected(tok, long_user).size(), " tokens")),
            std::string::npos)
      << refused.message();
  (*engine)->Shutdown(false);
}

}  // namespace
}  // namespace gk::eval
