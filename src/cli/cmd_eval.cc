// gemmakit eval verilog --dataset DIR (--model DIR [--chat-template FILE|NAME] | --base-url URL [--model NAME] |
//                       --candidates FILE) [--n-samples 5] [--temperature 0.8] [--top-p 0.95]
//                       [--max-tokens 1024] [--k 1,5]
//                       [--problems LIST] [--workers N] [--timeout S] [--out DIR] [--seed S]
// gemmakit eval compare A B [--labels A,B]   (A, B: --out directories or their summary.json)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "engines/generate/stop_ids.h"
#include "engines/serve/engine.h"
#include "formats/chat_format.h"
#include "model/gemma_model.h"
#include "tensor/thread_pool.h"
#include "tools/eval/verilog_eval.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::cli {

namespace {

// The prompt is rendered as serving would render it: --chat-template, else the checkpoint's
// template, else the built-in one for the architecture.
Result<ChatFormat> EvalChatFormat(const std::string& model, const std::string& chat_template) {
  GK_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelConfig(model));
  return ChatFormat::ForModel(model, config.arch == Arch::kGemma3 ? BuiltinChat::kGemma3 : BuiltinChat::kGemma4,
                              chat_template);
}

int RunEvalVerilog(int argc, char** argv) {
  CLI::App app{"Score a model on verilog-eval spec-to-RTL: generate n samples per problem, compile and simulate "
               "each with iverilog in a sandbox, report unbiased pass@k."};
  eval::VerilogEvalOptions o;
  std::string model, base_url, api_key, ks = "1,5", problems, chat_template;
  int concurrency = 16;
  double timeout = 60;
  bool unsafe = false, keep = false;
  EngineFlags engine_flags;
  app.add_option("--dataset", o.dataset, "verilog-eval checkout or its dataset_spec-to-rtl directory")->required();
  app.add_option("--model", model, "a model directory (in-process engine), or with --base-url the served name");
  app.add_option("--base-url", base_url, "an OpenAI-compatible server (gemmakit serve, vLLM, llama.cpp)");
  app.add_option("--api-key", api_key, "Bearer token for --base-url (default: $OPENAI_API_KEY)");
  app.add_option("--candidates", o.candidates, "score this JSONL of {problem, sample, code} instead of generating");
  app.add_option("--chat-template", chat_template,
                 "with --model DIR: chat template file, or the name of one of the checkpoint's templates (default: "
                 "the checkpoint's chat_template.jinja / tokenizer_config.json, else the built-in one)");
  app.add_option("--n-samples", o.n_samples, "samples per problem")->check(CLI::Range(1, 1000));
  app.add_option("--temperature", o.generation.temperature, "sampling temperature")->check(CLI::Range(0.0, 10.0));
  app.add_option("--top-p", o.generation.top_p, "nucleus sampling")->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-tokens", o.generation.max_tokens, "tokens per sample")->check(CLI::Range(1, 1 << 20));
  app.add_option("--k", ks, "pass@k values, e.g. 1,5 (only k <= n are reported)");
  app.add_option("--problems", problems, "comma-separated names or ProbNNN prefixes (default: all)");
  app.add_option("--workers", o.workers, "scoring processes at once (default: the cores)")->check(CLI::Range(0, 1024));
  app.add_option("--concurrency", concurrency, "requests in flight with --base-url")->check(CLI::Range(1, 4096));
  app.add_option("--timeout", timeout, "seconds each compile and each simulation may take")->check(CLI::Range(0.01, 86400.0));
  app.add_option("--seed", o.seed, "sample j of problem i uses seed + i * n + j");
  app.add_option("--out", o.out_dir, "write generations.jsonl, samples.jsonl, summary.json and plots here");
  app.add_flag("--keep-scratch", keep, "keep each sample's scratch directory (debugging)");
  app.add_flag("--unsafe-no-sandbox", unsafe, "run generated code without the Landlock sandbox (old kernels)");
  engine_flags.AddTo(app, /*tensor_parallel=*/false);
  CLI11_PARSE(app, argc, argv);
  engine_flags.Apply();
  if (Status st = engine_flags.CheckDevice(); !st.ok()) return Fail(st);
  o.ks.clear();
  for (const auto& k : SplitCommas(ks)) {
    char* end = nullptr;
    const long v = std::strtol(k.c_str(), &end, 10);
    if (*end || v < 1 || v > 1000) return Fail(StrCat("--k: '", k, "' is not a positive integer"));
    o.ks.push_back(static_cast<int>(v));
  }
  o.problems = SplitCommas(problems);
  o.score.compile_timeout_s = o.score.run_timeout_s = timeout;
  o.score.sandbox = !unsafe;
  o.score.keep_scratch = keep;
  if (api_key.empty()) {
    if (const char* k = std::getenv("OPENAI_API_KEY")) api_key = k;
  }
  const int sources = (!base_url.empty()) + (!o.candidates.empty()) + (base_url.empty() && !model.empty());
  if (sources != 1) return Fail("give exactly one of --model DIR, --base-url URL or --candidates FILE");
  if (!chat_template.empty() && (!base_url.empty() || !o.candidates.empty())) {
    return Fail("--chat-template applies to --model DIR (a server renders with its own template)");
  }
  o.metadata = {{"dataset", o.dataset},
                {"backend", !base_url.empty() ? base_url : !o.candidates.empty() ? "candidates" : "engine"},
                {"model", model},
                {"n_samples", o.n_samples},
                {"temperature", o.generation.temperature},
                {"top_p", o.generation.top_p},
                {"max_tokens", o.generation.max_tokens},
                {"seed", o.seed},
                {"timeout_s", timeout}};
  if (isatty(STDERR_FILENO)) {
    o.progress = [](const std::string& phase, int done, int total) {
      std::fprintf(stderr, "\r%-8s %5d/%-5d", phase.c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }

  // The in-process engine lives here, in the CLI: tools only see a generate function.
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ServeEngine> engine;
  std::optional<Tokenizer> tokenizer;
  eval::GenerateFn generate;
  if (!base_url.empty()) {
    generate = eval::ServerGenerator(base_url, model, api_key, concurrency);
  } else if (o.candidates.empty()) {
    if (!std::filesystem::is_directory(model)) return Fail(StrCat("--model ", model, ": not a model directory"));
    auto format = EvalChatFormat(model, chat_template);
    if (!format.ok()) return Fail(format.status());
    o.metadata["chat_template"] = format->Describe();
    auto tok = LoadModelTokenizer(model);
    if (!tok.ok()) return Fail(tok.status());
    tokenizer.emplace(std::move(*tok));
    pool = std::make_unique<ThreadPool>(engine_flags.threads);
    ModelLoadOptions lo;
    lo.quantize = engine_flags.Quantize();
    auto m = engine_flags.LoadRunner(model, pool.get(), lo);
    if (!m.ok()) return Fail(m.status());
    const ModelConfig config = (*m)->config();
    EngineOptions eo;
    eo.max_num_seqs = 64;
    auto e = ServeEngine::Create(std::move(*m), eo);
    if (!e.ok()) return Fail(e.status());
    engine = std::move(*e);
    generate = eval::EngineGenerator(*engine, *tokenizer, std::move(*format), StopIds(config, *tokenizer));
  }
  auto r = eval::RunVerilogEval(o, generate);
  if (engine) engine->Shutdown(false);
  if (!r.ok()) return Fail(r.status());
  std::printf("%s (sandbox: %s)\n", r->iverilog_version.c_str(), o.score.sandbox ? "landlock" : "NONE");
  if (o.metadata.contains("chat_template")) {
    std::printf("chat template: %s\n", o.metadata["chat_template"].get<std::string>().c_str());
  }
  std::fputs(eval::FormatEvalSummary(r->summary).c_str(), stdout);
  const double n = static_cast<double>(r->records.size());
  std::printf("generation %.2f s, scoring %.2f s (%.2f samples/s)\n", r->generation_seconds, r->scoring_seconds,
              r->scoring_seconds > 0 ? n / r->scoring_seconds : 0.0);
  for (const auto& f : r->files_written) std::printf("wrote %s\n", f.c_str());
  return 0;
}

Result<nlohmann::json> LoadSummary(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? path + "/summary.json" : path;
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  return ParseJson(text, file);
}

int RunEvalCompare(int argc, char** argv) {
  CLI::App app{"Compare two eval runs side by side (Markdown)."};
  std::vector<std::string> runs;
  std::string labels;
  app.add_option("runs", runs, "two --out directories (or their summary.json)")->required()->expected(2);
  app.add_option("--labels", labels, "two labels, comma-separated");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::string> names = SplitCommas(labels);
  if (names.empty()) names = {std::filesystem::path(runs[0]).filename().string(), std::filesystem::path(runs[1]).filename().string()};
  if (names.size() != 2) return Fail("--labels: give two labels");
  auto a = LoadSummary(runs[0]);
  if (!a.ok()) return Fail(a.status());
  auto b = LoadSummary(runs[1]);
  if (!b.ok()) return Fail(b.status());
  // The summaries are outside input: a field of an unexpected type is an error, not an abort.
  auto md = GuardedParse("eval compare", [&] { return eval::CompareEvalMarkdown(*a, *b, names[0], names[1]); });
  if (!md.ok()) return Fail(md.status());
  std::fputs(md->c_str(), stdout);
  return 0;
}

}  // namespace

int RunEval(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "verilog") return RunEvalVerilog(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "compare") return RunEvalCompare(argc - 1, argv + 1);
  std::fprintf(argc >= 2 && std::string(argv[1]) != "--help" ? stderr : stdout,
               "usage: gemmakit eval verilog --dataset DIR (--model DIR | --base-url URL | --candidates FILE) ...\n"
               "       gemmakit eval compare RUN_A RUN_B [--labels A,B]\n");
  return argc >= 2 && std::string(argv[1]) == "--help" ? 0 : 2;
}

}  // namespace gk::cli
