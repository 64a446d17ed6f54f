// libFuzzer target for the Gemma 4 and Gemma 3 chat templates (src/formats/chat_template.h):
// byte 0 sets the options, the rest is role NUL content NUL role NUL content ... Message
// text must never become control tokens: the ids of the template equal those of the same
// conversation with every message's text removed, plus the text's own ids.
#include <cstdint>
#include <vector>

#include "formats/chat_template.h"
#include "fuzz_util.h"

using namespace gk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  ChatTemplateOptions o;
  o.add_generation_prompt = data[0] & 1;
  o.enable_thinking = data[0] & 2;
  o.empty_thought_block = data[0] & 4;
  const std::vector<std::string_view> parts = fuzz::SplitNul(fuzz::AsText(data + 1, size - 1), 32);
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i + 1 < parts.size(); i += 2) messages.push_back({std::string(parts[i]), std::string(parts[i + 1])});
  const Tokenizer& tok = fuzz::SmallTokenizer();
  auto ids = ApplyGemma4ChatTemplate(tok, messages, o);
  fuzz::Check(ids.ok() && !ids->empty() && (*ids)[0] == tok.bos_id());
  // Control tokens come only from the template: as many as with empty messages.
  std::vector<ChatMessage> empty = messages;
  for (ChatMessage& m : empty) m.content.clear();
  auto bare = ApplyGemma4ChatTemplate(tok, empty, o);
  fuzz::Check(bare.ok());
  auto specials = [&](const std::vector<int32_t>& v) {
    size_t n = 0;
    for (int32_t id : v) n += tok.IsSpecial(id);
    return n;
  };
  fuzz::Check(specials(*ids) == specials(*bare));
  (void)RenderGemma4ChatText(messages, o);
  auto g3 = ApplyGemma3ChatTemplate(tok, messages, o);
  auto g3_text = RenderGemma3ChatText(messages, o);
  fuzz::Check(g3.ok() == g3_text.ok());
  return 0;
}
