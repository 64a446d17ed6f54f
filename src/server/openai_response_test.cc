#include "server/openai_response.h"

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace gk::server {
namespace {

TEST(OpenAIResponseTest, IdsAndSse) {
  const std::string a = NewRequestId("cmpl-"), b = NewRequestId("chatcmpl-");
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 32u);
  EXPECT_EQ(b.rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(NewRequestId("cmpl-"), a);
  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 never throws; it is replaced.
  EXPECT_EQ(DumpJson(json("\xFF")), "\"\xEF\xBF\xBD\"");
}

TEST(OpenAIResponseTest, CompletionResponseShape) {
  ChoiceOut c;
  c.index = 0;
  c.text = "hi";
  c.finish_reason = "stop";
  c.stop_reason = "\n";
  Usage u{5, 2, 1};
  const json j = CompletionResponse("cmpl-1", 7, "m", {c}, u);
  EXPECT_EQ(DumpJson(j),
            R"({"id":"cmpl-1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"hi",)"
            R"("logprobs":null,"finish_reason":"stop","stop_reason":"\n"}],"usage":{"prompt_tokens":5,)"
            R"("completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1}}})");
}

TEST(OpenAIResponseTest, ChatResponseAndChunks) {
  ChoiceOut c;
  c.text = "yo";
  c.finish_reason = "length";
  const json r = ChatResponse("chatcmpl-1", 7, "m", {c}, Usage{1, 2, 0});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "yo");
  EXPECT_EQ(r["usage"]["total_tokens"], 3);

  ChoiceOut first;
  first.text = "He";
  first.role = true;
  json k = ChatChunk("chatcmpl-1", 7, "m", first, json(nullptr));
  EXPECT_EQ(DumpJson(k),
            R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,)"
            R"("delta":{"role":"assistant","content":"He"},"logprobs":null,"finish_reason":null}],"usage":null})");
  ChoiceOut last;
  last.finish_reason = "stop";
  k = ChatChunk("chatcmpl-1", 7, "m", last, std::nullopt);
  EXPECT_EQ(k["choices"][0]["delta"], json::object());
  EXPECT_EQ(k["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(k.contains("usage"));
  const json u = UsageChunk(true, "chatcmpl-1", 7, "m", Usage{3, 4, 0});
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["completion_tokens"], 4);
  const json cc = CompletionChunk("cmpl-1", 7, "m", last, json(nullptr));
  EXPECT_EQ(cc["object"], "text_completion");
  EXPECT_EQ(cc["choices"][0]["text"], "");
  EXPECT_TRUE(cc["usage"].is_null());
}

TEST(OpenAIResponseTest, LogprobFormats) {
  LogprobEntry e{"a", -0.5, {{"a", -0.5}, {"b", -1.0 / 0.0}}, 3};
  const json legacy = CompletionLogprobs({e});
  EXPECT_EQ(legacy["tokens"], json::array({"a"}));
  EXPECT_EQ(legacy["token_logprobs"], json::array({-0.5}));
  EXPECT_EQ(legacy["top_logprobs"][0]["b"], -9999.0);  // -inf clamped as vLLM does
  EXPECT_EQ(legacy["text_offset"], json::array({3}));
  const json chat = ChatLogprobs({e});
  EXPECT_EQ(chat["content"][0]["token"], "a");
  EXPECT_EQ(chat["content"][0]["bytes"], json::array({97}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "b");
}

TEST(OpenAIResponseTest, ModelListAndErrors) {
  const json m = ModelList({{"m", "/models/m", "", 5, 4096}, {"lora1", "/a", "m", 5, 4096}});
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "m");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "gemmakit");
  EXPECT_TRUE(m["data"][0]["parent"].is_null());
  EXPECT_EQ(m["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(m["data"][1]["parent"], "m");
  EXPECT_EQ(ApiError::BadRequest("bad", "n").Body(),
            R"({"error":{"message":"bad","type":"invalid_request_error","param":"n","code":400}})");
  EXPECT_EQ(ApiError::NotFound("The model `x` does not exist.").ToJson()["error"]["type"], "NotFoundError");
  EXPECT_EQ(ApiError::Unauthorized().status, 401);
  EXPECT_EQ(ApiError::Unavailable("x").status, 503);
}

}  // namespace
}  // namespace gk::server
