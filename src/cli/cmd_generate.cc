// gemmakit generate --model DIR (--prompt TEXT | --chat TEXT [--system TEXT] [--think]
//                   [--chat-template FILE|NAME]) [--max-tokens N] [--temperature T]
//                   [--top-k K] [--top-p P] [--seed S] [--threads N] [--quantize none|q8_0] [--bf16-activations split|round]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/common.h"
#include "engines/generate/generator.h"
#include "formats/chat_format.h"
#include "model/quantize.h"

namespace gk::cli {

int RunGenerate(int argc, char** argv) {
  CLI::App app{"Generate text, streamed to stdout; prompt and generation speed go to stderr."};
  std::string model_dir, prompt, chat, system;
  GenerateOptions o;
  o.sampling.temperature = 0.f;
  app.add_option("--model", model_dir, "model directory (Hugging Face layout)")->required();
  auto* p = app.add_option("--prompt", prompt, "raw text prompt (BOS is prepended)");
  auto* c = app.add_option("--chat", chat, "a user message, wrapped in the chat template");
  p->excludes(c);
  app.add_option("--system", system, "system message for --chat");
  std::string chat_template;
  bool think = false;
  app.add_option("--chat-template", chat_template,
                 "chat template file, or the name of one of the checkpoint's templates (default: the checkpoint's "
                 "chat_template.jinja / tokenizer_config.json, else the built-in one)");
  app.add_flag("--think", think, "enable_thinking in the chat template (the model may reason first)");
  app.add_option("--max-tokens", o.max_tokens, "most tokens to generate")->check(CLI::Range(1, 1 << 24));
  app.add_option("--temperature", o.sampling.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o.sampling.top_k, "keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", o.sampling.top_p, "nucleus mass")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", o.sampling.seed, "sampling seed");
  EngineFlags engine;
  engine.AddTo(app);
  CLI11_PARSE(app, argc, argv);
  engine.Apply();
  if (Status st = engine.CheckDevice(); !st.ok()) return Fail(st);
  if (prompt.empty() && chat.empty()) return Fail("give --prompt TEXT or --chat TEXT");
  auto tp = engine.TensorParallelGroup();  // every rank runs the same steps on its share
  if (!tp.ok()) return Fail(tp.status());

  auto tokenizer = LoadModelTokenizer(model_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  ThreadPool pool(engine.threads);
  ModelLoadOptions lo;
  lo.quantize = engine.Quantize();
  lo.tp = *tp;
  auto model = engine.LoadRunner(model_dir, &pool, lo);
  if (!model.ok()) return Fail(model.status());
  const ModelConfig& config = (*model)->config();

  std::vector<int32_t> ids;
  if (!chat.empty()) {
    auto format = ChatFormat::ForModel(model_dir, config.arch == Arch::kGemma3 ? BuiltinChat::kGemma3 : BuiltinChat::kGemma4,
                                       chat_template);
    if (!format.ok()) return Fail(format.status());
    ChatRenderInput in;
    if (!system.empty()) in.messages.push_back({{"role", "system"}, {"content", system}});
    in.messages.push_back({{"role", "user"}, {"content", chat}});
    if (think) in.kwargs["enable_thinking"] = true;
    auto r = format->Apply(*tokenizer, in);
    if (!r.ok()) return Fail(r.status());
    std::fprintf(stderr, "chat template: %s\n", format->Describe().c_str());
    ids = std::move(*r);
  } else {
    ids.push_back(config.bos_token_id);
    for (int32_t id : tokenizer->Encode(prompt)) ids.push_back(id);
  }
  o.stop_ids = StopIds(config, *tokenizer);

  StreamingDecoder decoder(*tokenizer, /*skip_special=*/true);
  auto stats = Generate(**model, ids, o, [&](int32_t id) {
    const std::string text = decoder.Add(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  const std::string rest = decoder.Flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!stats.ok()) return Fail(stats.status());
  std::fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s | generation: %lld tokens, %.1f tokens/s (%s)\n",
               (long long)stats->prompt_tokens, double(stats->prompt_tokens) / std::max(1e-9, stats->prefill_seconds),
               (long long)stats->generated_tokens,
               stats->decode_steps > 0 ? double(stats->decode_steps) / std::max(1e-9, stats->decode_seconds) : 0.0,
               (*model)->device() == "cpu" ? StrCat(pool.size(), " threads").c_str() : (*model)->device().c_str());
  return 0;
}

}  // namespace gk::cli
