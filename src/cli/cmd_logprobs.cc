// gemmakit logprobs --model DIR (--text TEXT | --tokens ID,ID,...) --json [--dump-logits F.npy] [--chunk N]
//                   [--quantize none|q8_0] [--bf16-activations split|round]
// Prints {"tokens": [...], "logprobs": [...], "argmax": [...]}: logprobs[i] is the
// log-probability the model gave at position i to tokens[i + 1]; argmax[i] its top token.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/common.h"
#include "engines/generate/single_sequence.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/gemma_model.h"

namespace gk::cli {

int RunLogprobs(int argc, char** argv) {
  CLI::App app{"Log-probabilities of a text under the model, position by position."};
  std::string model_dir, text, tokens_arg, dump;
  bool json_out = false;
  int chunk = 0;
  app.add_option("--model", model_dir, "model directory")->required();
  auto* t = app.add_option("--text", text, "text to score (BOS is prepended)");
  auto* k = app.add_option("--tokens", tokens_arg, "comma-separated token ids (BOS prepended when missing)");
  t->excludes(k);
  app.add_flag("--json", json_out, "print JSON (the only output format)");
  app.add_option("--dump-logits", dump, "also write the full (T, V) float32 logits as .npy");
  app.add_option("--chunk", chunk, "tokens per forward pass; 1 = token-by-token decode, 0 = the whole text at once")
      ->check(CLI::NonNegativeNumber);
  EngineFlags engine;
  engine.AddTo(app);
  CLI11_PARSE(app, argc, argv);
  engine.Apply();
  if (Status st = engine.CheckDevice(); !st.ok()) return Fail(st);
  if (text.empty() && tokens_arg.empty()) return Fail("give --text TEXT or --tokens ID,ID,...");
  auto tp = engine.TensorParallelGroup();  // every rank runs the same passes on its share
  if (!tp.ok()) return Fail(tp.status());

  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return Fail(config.status());
  std::vector<int32_t> ids;
  if (!tokens_arg.empty()) {
    auto parsed = ParseIdList(tokens_arg);
    if (!parsed.ok()) return Fail(parsed.status());
    ids = std::move(*parsed);
    if (ids.front() != config->bos_token_id) ids.insert(ids.begin(), config->bos_token_id);
  } else {
    auto tokenizer = LoadModelTokenizer(model_dir);
    if (!tokenizer.ok()) return Fail(tokenizer.status());
    ids.push_back(config->bos_token_id);
    for (int32_t id : tokenizer->Encode(text)) ids.push_back(id);
  }
  const int64_t n = int64_t(ids.size());
  if (config->max_position_embeddings > 0 && n > config->max_position_embeddings) {
    return Fail(StrCat("text of ", n, " tokens is longer than the model's context of ",
                       config->max_position_embeddings, " tokens"));
  }
  ThreadPool pool(engine.threads);
  ModelLoadOptions lo;
  lo.max_chunk = int(chunk > 0 ? chunk : std::min<int64_t>(n, 512));
  lo.quantize = engine.Quantize();
  lo.tp = *tp;
  auto model = engine.LoadRunner(model_dir, &pool, lo);
  if (!model.ok()) return Fail(model.status());
  const int64_t V = config->vocab_size;
  std::optional<NpyWriter> npy;
  if (!dump.empty() && tp->rank == 0) {  // rank 0 alone writes
    auto w = NpyWriter::Create(dump, {n, V});
    if (!w.ok()) return Fail(w.status());
    npy.emplace(std::move(*w));
  }
  auto seq = SingleSequence::Create(**model, n);
  if (!seq.ok()) return Fail(seq.status());
  const int64_t step = (*model)->max_chunk();
  std::vector<float> logits(size_t(step * V));
  nlohmann::json logprobs = nlohmann::json::array(), argmax = nlohmann::json::array();
  for (int64_t b = 0; b < n; b += step) {
    const int64_t len = std::min(step, n - b);
    Status s = seq->Forward({ids.data() + b, size_t(len)}, LogitsMode::kAll, logits.data());
    if (!s.ok()) return Fail(s);
    for (int64_t i = 0; i < len; ++i) {
      const float* row = logits.data() + i * V;
      argmax.push_back(ArgMax(row, V));
      if (b + i + 1 < n) logprobs.push_back(LogSoftmaxAt(row, V, ids[size_t(b + i + 1)]));
    }
    if (npy) {
      s = npy->Append(logits.data(), len * V);
      if (!s.ok()) return Fail(s);
    }
  }
  if (npy) {
    Status s = npy->Commit();
    if (!s.ok()) return Fail(s);
  }
  nlohmann::json out = {{"tokens", ids}, {"logprobs", logprobs}, {"argmax", argmax}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gk::cli
