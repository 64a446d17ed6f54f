#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gk::server {
namespace {

OpenAIRequest ParseOk(const std::string& body, ApiKind kind = ApiKind::kCompletion) {
  OpenAIRequest r;
  auto e = ParseOpenAIRequest(body, kind, &r);
  EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
  return r;
}

ApiError ParseErr(const std::string& body, ApiKind kind = ApiKind::kCompletion) {
  OpenAIRequest r;
  auto e = ParseOpenAIRequest(body, kind, &r);
  EXPECT_TRUE(e.has_value()) << body << " was accepted";
  return e.value_or(ApiError{});
}

TEST(OpenAIRequestTest, CompletionDefaults) {
  const OpenAIRequest r = ParseOk(R"({"prompt": "hi"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_EQ(r.top_p, 1.0);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_TRUE(r.add_special_tokens);
  EXPECT_TRUE(r.skip_special_tokens);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.model.empty());
}

TEST(OpenAIRequestTest, CompletionFields) {
  const OpenAIRequest r = ParseOk(R"({"model": "m", "prompt": ["a", "b"], "max_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": 40, "min_tokens": 2, "seed": 42, "stop": ["x", "", "yz"], "stop_token_ids": [5, 6],
      "include_stop_str_in_output": true, "n": 3, "ignore_eos": true, "logprobs": 2, "stream": true,
      "stream_options": {"include_usage": true, "continuous_usage_stats": true}, "user": "u",
      "add_special_tokens": false, "skip_special_tokens": false, "cache_salt": "s", "truncate_prompt_tokens": 9,
      "presence_penalty": 0, "frequency_penalty": 0.0, "best_of": 1, "logit_bias": {}})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].text, "b");
  EXPECT_EQ(r.max_tokens.value(), 7);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.min_tokens, 2);
  EXPECT_EQ(r.seed.value(), 42);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));  // empty stop strings are dropped
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(r.include_stop_str_in_output);
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage && r.continuous_usage_stats);
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_FALSE(r.skip_special_tokens);
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.truncate_prompt_tokens.value(), 9);
  EXPECT_TRUE(r.ignored_fields.empty());
}

TEST(OpenAIRequestTest, PromptForms) {
  EXPECT_EQ(ParseOk(R"({"prompt": [1, 2, 3]})").prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  const OpenAIRequest r = ParseOk(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[1].tokens, (std::vector<int32_t>{3}));
  EXPECT_EQ(ParseOk(R"({"prompt": ""})").prompts[0].text, "");
  EXPECT_EQ(ParseOk(R"({"prompt": "a", "stop": "s"})").stop, (std::vector<std::string>{"s"}));
  EXPECT_EQ(ParseOk(R"({"prompt": "a", "max_tokens": 16.0})").max_tokens.value(), 16);  // as pydantic
  EXPECT_EQ(ParseOk(R"({"prompt": "a", "top_k": -1})").top_k, 0);
  EXPECT_EQ(ParseOk(R"({"prompt": "a", "max_tokens": null, "temperature": null})").temperature, 1.0);
}

TEST(OpenAIRequestTest, UnknownFieldsAreIgnoredAndReported) {
  const OpenAIRequest r = ParseOk(R"({"prompt": "a", "foo": 1, "bar": {"x": []}})");
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"foo", "bar"}));  // in the body's order
}

// Tools and a tool-call round trip reach the template as the client wrote them (key order kept),
// with JSON-string arguments decoded into an object, as vLLM passes them.
TEST(OpenAIRequestTest, ToolsAndToolCalls) {
  const OpenAIRequest r = ParseOk(R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "Use the tool.", "tool_calls": [{"id": "call_1",
       "type": "function", "function": {"name": "get_weather", "arguments": "{\"zeta\": 1, \"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
       "properties": {"zeta": {"type": "integer"}, "city": {"type": "string"}}}}}]})",
                                  ApiKind::kChat);
  ASSERT_EQ(r.chat.messages.size(), 3u);
  EXPECT_EQ(r.chat.messages[1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"zeta":1,"city":"Paris"})");
  EXPECT_EQ(r.chat.messages[1]["reasoning_content"], "Use the tool.");
  EXPECT_EQ(r.chat.messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(r.chat.tools[0]["function"]["parameters"]["properties"].dump(),
            R"({"zeta":{"type":"integer"},"city":{"type":"string"}})");
  EXPECT_TRUE(r.parse_tool_calls);  // tool_choice defaults to "auto" with tools
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_FALSE(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none", )" + tools + "}",
                       ApiKind::kChat)
                   .parse_tool_calls);
  EXPECT_FALSE(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "include_reasoning": false})",
                       ApiKind::kChat)
                   .include_reasoning);
  // Arguments that are not a JSON object stay a string (the template prints them verbatim).
  const OpenAIRequest s = ParseOk(R"({"messages": [{"role": "assistant", "tool_calls": [{"function":
      {"name": "f", "arguments": "not json"}}]}]})",
                                  ApiKind::kChat);
  EXPECT_EQ(s.chat.messages[0]["tool_calls"][0]["function"]["arguments"], "not json");
}

TEST(OpenAIRequestTest, ChatFields) {
  const OpenAIRequest r = ParseOk(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}], "max_completion_tokens": 5, "max_tokens": 9,
      "logprobs": true, "top_logprobs": 3, "chat_template_kwargs": {"enable_thinking": true},
      "add_generation_prompt": false})",
                                  ApiKind::kChat);
  ASSERT_EQ(r.chat.messages.size(), 3u);
  EXPECT_EQ(r.chat.messages[1]["content"].dump(),
            R"([{"type":"text","text":"Hi "},{"type":"text","text":"there"}])");  // the template joins parts
  EXPECT_TRUE(r.chat.messages[2]["content"].is_null());
  EXPECT_EQ(r.max_tokens.value(), 5);  // max_completion_tokens wins
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.chat.kwargs.dump(), R"({"enable_thinking":true})");
  EXPECT_FALSE(r.chat.add_generation_prompt);
  EXPECT_TRUE(r.chat.tools.is_null());
  EXPECT_FALSE(r.parse_tool_calls);
  EXPECT_TRUE(r.include_reasoning);
  EXPECT_FALSE(r.add_special_tokens);  // the template adds <bos>
  EXPECT_EQ(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", ApiKind::kChat).logprobs,
            0);
  EXPECT_EQ(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})", ApiKind::kChat)
                .max_tokens.value(),
            4);
}

struct BadCase {
  const char* body;
  ApiKind kind;
  const char* message_part;
  const char* param;
};

TEST(OpenAIRequestTest, EveryBadInputIsA400WithAClearMessage) {
  const ApiKind C = ApiKind::kCompletion, H = ApiKind::kChat;
  const BadCase cases[] = {
      {"{not json", C, "not valid JSON", ""},
      {"", C, "not valid JSON", ""},
      {"[1, 2]", C, "must be a JSON object", ""},
      {"{\"prompt\": \"\xC3\x28\"}", C, "not valid UTF-8", ""},
      {"{\"prompt\": \"\xED\xA0\x80\"}", C, "not valid UTF-8", ""},  // a UTF-16 surrogate
      {R"({})", C, "'prompt' is required", "prompt"},
      {R"({"prompt": 5})", C, "'prompt' must be", "prompt"},
      {R"({"prompt": []})", C, "must not be empty", "prompt"},
      {R"({"prompt": [[]]})", C, "must not be empty", "prompt"},
      {R"({"prompt": [1, "a"]})", C, "token ids", "prompt"},
      {R"({"prompt": [-1]})", C, "not a token id", "prompt"},
      {R"({"prompt": "a", "max_tokens": "16"})", C, "'max_tokens' must be an integer, got string", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 1.5})", C, "must be an integer", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 0})", C, "max_tokens must be at least 1, got 0", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": -5})", C, "max_tokens must be at least 1, got -5", "max_tokens"},
      {R"({"prompt": "a", "temperature": -0.1})", C, "temperature must be non-negative", "temperature"},
      {R"({"prompt": "a", "temperature": "hot"})", C, "'temperature' must be a number", "temperature"},
      {R"({"prompt": "a", "top_p": 0})", C, "top_p must be in (0, 1]", "top_p"},
      {R"({"prompt": "a", "top_p": 1.5})", C, "top_p must be in (0, 1]", "top_p"},
      {R"({"prompt": "a", "top_k": -2})", C, "top_k must be", "top_k"},
      {R"({"prompt": "a", "n": 0})", C, "n must be at least 1", "n"},
      {R"({"prompt": "a", "n": 100000})", C, "n must be at most", "n"},
      {R"({"prompt": "a", "n": true})", C, "'n' must be an integer, got boolean", "n"},
      {R"({"prompt": "a", "stream": "yes"})", C, "'stream' must be a boolean", "stream"},
      {R"({"prompt": "a", "stop": 3})", C, "'stop' must be a string or a list of strings", "stop"},
      {R"({"prompt": "a", "stop": ["a", 1]})", C, "'stop' must be", "stop"},
      {R"({"prompt": "a", "stop_token_ids": "1"})", C, "'stop_token_ids' must be", "stop_token_ids"},
      {R"({"prompt": "a", "logprobs": 21})", C, "logprobs must be between 0 and 20", "logprobs"},
      {R"({"prompt": "a", "logprobs": true})", C, "'logprobs' must be an integer", "logprobs"},
      {R"({"prompt": "a", "min_tokens": -1})", C, "min_tokens must be greater than or equal to 0", "min_tokens"},
      {R"({"prompt": "a", "min_tokens": 5, "max_tokens": 2})", C, "min_tokens must be less than or equal",
       "min_tokens"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", C, "only be defined when `stream=True`",
       "stream_options"},
      {R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": 1}})", C,
       "'stream_options.include_usage' must be a boolean", "stream_options.include_usage"},
      {R"({"prompt": "a", "seed": "x"})", C, "'seed' must be an integer", "seed"},
      {R"({"prompt": "a", "model": 3})", C, "'model' must be a string", "model"},
      {R"({"prompt": "a", "best_of": 2})", C, "best_of", "best_of"},
      {R"({"prompt": "a", "presence_penalty": 0.5})", C, "not supported", "presence_penalty"},
      {R"({"prompt": "a", "logit_bias": {"5": 1}})", C, "not supported", "logit_bias"},
      {R"({"prompt": "a", "suffix": "x"})", C, "not currently supported", "suffix"},
      {R"({"prompt": "a", "echo": true, "logprobs": 1})", C, "not supported", "echo"},
      {R"({"prompt": "a", "cache_salt": ""})", C, "cache_salt must not be empty", "cache_salt"},
      {R"({"prompt": ["a"], "n": 128, "max_tokens": 1, "foo": 0, "x": [)", C, "not valid JSON", ""},
      {R"({"messages": []})", H, "'messages' must not be empty", "messages"},
      {R"({"messages": "hi"})", H, "'messages' must be a list of messages", "messages"},
      {R"({"prompt": "hi"})", H, "'messages' is required", "messages"},
      {R"({"messages": [{"content": "x"}]})", H, "messages[0].role' is required", "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", H, "'messages[0].content' must be", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})", H,
       "'image_url' is not supported", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", H, "'logprobs' must be a boolean",
       "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", H,
       "`logprobs` must be set to true", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", H,
       "max_completion_tokens must be at least 1", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", H,
       "'tools[0].function' must be an object", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})", H,
       "'tools[0].function.name' must be a non-empty string", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", H,
       "\"required\" is not supported", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}})", H,
       "naming a function is not supported", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]})", H,
       "only allowed on assistant messages", "messages"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})", H,
       "arguments' must be a JSON object or a string", "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": 1}})", H,
       "enable_thinking' must be a boolean", "chat_template_kwargs.enable_thinking"},
  };
  for (const BadCase& c : cases) {
    const ApiError e = ParseErr(c.body, c.kind);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_NE(e.message.find(c.message_part), std::string::npos) << c.body << " -> " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
  }
}

TEST(OpenAIRequestTest, ContextLength) {
  OpenAIRequest r = ParseOk(R"({"prompt": "a"})");
  int64_t max_tokens = 0;
  EXPECT_FALSE(CheckContextLength(r, 10, 100, &max_tokens));
  EXPECT_EQ(max_tokens, 16);  // the completions default
  r = ParseOk(R"({"prompt": "a", "max_tokens": 90})");
  EXPECT_FALSE(CheckContextLength(r, 10, 100, &max_tokens));
  r = ParseOk(R"({"prompt": "a", "max_tokens": 91})");
  auto e = CheckContextLength(r, 10, 100, &max_tokens);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->message,
            "This model's maximum context length is 100 tokens. However, you requested 101 tokens (10 in the "
            "messages, 91 in the completion). Please reduce the length of the messages or completion.");
  r = ParseOk(R"({"prompt": "a", "max_tokens": 9223372036854775807})");
  e = CheckContextLength(r, 10, 100, &max_tokens);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("maximum context length is 100"), std::string::npos);
  r = ParseOk(R"({"prompt": "a", "max_tokens": 1e30})");
  EXPECT_TRUE(CheckContextLength(r, 10, 100, &max_tokens));
  e = CheckContextLength(ParseOk(R"({"prompt": "a"})"), 100, 100, &max_tokens);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("your request has 100 input tokens"), std::string::npos) << e->message;
  // Chat: the default is what is left of the context.
  r = ParseOk(R"({"messages": [{"role": "user", "content": "x"}]})", ApiKind::kChat);
  EXPECT_FALSE(CheckContextLength(r, 30, 100, &max_tokens));
  EXPECT_EQ(max_tokens, 70);
}

TEST(OpenAIRequestTest, TokenizeAndDetokenize) {
  TokenizeRequest t;
  ASSERT_FALSE(ParseTokenizeRequest(R"({"prompt": "hi"})", &t));
  EXPECT_FALSE(t.is_chat);
  EXPECT_TRUE(t.add_special_tokens);
  ASSERT_FALSE(ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "x"}]})", &t));
  EXPECT_TRUE(t.is_chat);
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_TRUE(ParseTokenizeRequest(R"({})", &t));
  EXPECT_TRUE(ParseTokenizeRequest(R"({"prompt": 1})", &t));
  DetokenizeRequest d;
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens": [1, 2]})", &d));
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens": "12"})", &d));
  EXPECT_TRUE(ParseDetokenizeRequest(R"({})", &d));
}

TEST(OpenAIRequestTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

// Whatever a client sends is a 400 with a one-line message, never an exception: a number too
// large for a double (nlohmann throws out_of_range), nesting a million deep (dump() and copies
// recurse), for every body parser.
TEST(OpenAIRequestTest, HostileBodiesAreA400) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const std::string& body :
       {std::string(R"({"prompt": "a", "max_tokens": 1e999})"), std::string(R"({"messages": [], "seed": -1e400})"),
        R"({"prompt": )" + deep + "}", R"({"messages": [{"role": "user", "content": )" + deep + "}]}"}) {
    for (ApiKind kind : {ApiKind::kCompletion, ApiKind::kChat}) {
      const ApiError e = ParseErr(body, kind);
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(e.message.find("The request body is not valid JSON: "), std::string::npos) << e.message;
      EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
      EXPECT_NO_THROW((void)e.Body());
    }
    TokenizeRequest t;
    DetokenizeRequest d;
    EXPECT_NE(ParseTokenizeRequest(body, &t)->message.find("not valid JSON"), std::string::npos);
    EXPECT_NE(ParseDetokenizeRequest(body, &d)->message.find("not valid JSON"), std::string::npos);
  }
}

}  // namespace
}  // namespace gk::server
