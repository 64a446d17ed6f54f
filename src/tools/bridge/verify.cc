#include "tools/bridge/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <unistd.h>

#include "formats/gguf.h"
#include "formats/orbax/orbax.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/gemma_model.h"
#include "model/tunix_layout.h"
#include "tensor/dtype.h"
#include "tools/bridge/convert.h"
#include "tools/bridge/gguf_export.h"
#include "model/lora_source.h"

namespace gk::bridge {
namespace {

namespace fs = std::filesystem;

// One checkpoint as named float32 tensors, read on demand.
struct View {
  std::string format;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::function<Result<std::vector<float>>(const std::string&)> read;
  std::shared_ptr<void> keep;  // whatever the reader needs alive
};

std::vector<float> ToF32(DType dt, const uint8_t* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (dt) {
      case DType::kF32: std::memcpy(&out[size_t(i)], p + 4 * i, 4); break;
      case DType::kBF16: std::memcpy(&h, p + 2 * i, 2); out[size_t(i)] = Bf16ToF32(h); break;
      case DType::kF16: std::memcpy(&h, p + 2 * i, 2); out[size_t(i)] = F16ToF32(h); break;
      case DType::kF64: { double d; std::memcpy(&d, p + 8 * i, 8); out[size_t(i)] = float(d); break; }
      case DType::kI32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[size_t(i)] = float(v); break; }
      case DType::kI64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); out[size_t(i)] = float(v); break; }
      default: out[size_t(i)] = NAN; break;
    }
  }
  return out;
}

Result<View> SafetensorsView(const std::string& path, const std::string& format) {
  GK_ASSIGN_OR_RETURN(SafetensorsSet set, SafetensorsSet::Open(path));
  auto shared = std::make_shared<SafetensorsSet>(std::move(set));
  View v;
  v.format = format;
  for (const std::string& n : shared->Names()) v.shapes[n] = shared->Find(n)->shape;
  v.read = [shared](const std::string& n) -> Result<std::vector<float>> {
    const TensorInfo* t = shared->Find(n);
    std::vector<uint8_t> raw(t->nbytes);
    GK_RETURN_IF_ERROR(shared->ReadInto(*t, raw.data()));
    return ToF32(t->dtype, raw.data(), t->numel());
  };
  v.keep = shared;
  return v;
}

std::vector<int64_t> Reversed(const std::vector<int64_t>& ne) { return {ne.rbegin(), ne.rend()}; }

bool IsGgufFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  char magic[4] = {};
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const bool ok = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  std::fclose(f);
  return ok;
}

// A GGUF file: its tensors under their GGUF names, shapes in PyTorch order, dequantized.
Result<View> GgufView(const std::string& path) {
  GK_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  auto shared = std::make_shared<GgufFile>(std::move(file));
  View v;
  v.format = "GGUF";
  for (const GgufTensorInfo& t : shared->tensors()) v.shapes[t.name] = Reversed(t.ne);
  v.read = [shared](const std::string& n) -> Result<std::vector<float>> {
    const GgufTensorInfo* t = shared->FindTensor(n);
    std::vector<uint8_t> raw(t->nbytes);
    GK_RETURN_IF_ERROR(shared->ReadTensor(*t, raw.data()));
    std::vector<float> out(size_t(t->numel()));
    GK_RETURN_IF_ERROR(DequantizeGgml(t->type, raw.data(), t->numel(), out.data()));
    return out;
  };
  v.keep = shared;
  return v;
}

// A Hugging Face checkpoint as llama.cpp's converter would write it (GGUF names, the Gemma 3
// norm +1, rope_freqs), in f32: what a GGUF export of it must hold up to its element type.
Result<View> GgufPlanView(const std::string& hf_path, const std::string& format) {
  GK_ASSIGN_OR_RETURN(GgufExportPlan plan, PlanGgufExport(hf_path, GgufType::kF32));
  auto shared = std::make_shared<GgufExportPlan>(std::move(plan));
  auto index = std::make_shared<std::map<std::string, size_t>>();
  View v;
  v.format = format;
  for (size_t i = 0; i < shared->tensors.size(); ++i) {
    const GgufTensorSpec& t = shared->tensors[i];
    v.shapes[t.name] = Reversed(t.ne);
    (*index)[t.name] = i;
  }
  v.read = [shared, index](const std::string& n) -> Result<std::vector<float>> {
    const GgufTensorSpec& t = shared->tensors[index->at(n)];
    int64_t numel = 1;
    for (int64_t d : t.ne) numel *= d;
    std::vector<float> out(static_cast<size_t>(numel));
    GK_RETURN_IF_ERROR(t.fill(reinterpret_cast<uint8_t*>(out.data()), out.size() * sizeof(float)));
    return out;
  };
  v.keep = shared;
  return v;
}

// A Tunix base tree converted to a temporary Hugging Face directory, removed with the view.
Result<View> TunixView(const std::string& path, const std::string& item_dir, const VerifyOptions& o, bool gguf_names) {
  const std::string tmp = (fs::temp_directory_path() / StrCat("gk-verify-", getpid(), "-", std::hash<std::string>{}(path))).string();
  std::error_code ec;
  fs::remove_all(tmp, ec);
  GK_RETURN_IF_ERROR(OrbaxToHf(item_dir, tmp, o.config_dir).status());
  auto v = gguf_names ? GgufPlanView(tmp, "Tunix Orbax (mapped to GGUF names)")
                      : SafetensorsView(tmp, "Tunix Orbax (mapped to Hugging Face names)");
  if (!v.ok()) {
    fs::remove_all(tmp, ec);
    return v.status();
  }
  v->keep = std::shared_ptr<void>(new int(0), [tmp, keep = v->keep](int* p) {
    std::error_code e;
    fs::remove_all(tmp, e);
    delete p;
  });
  return v;
}

// gguf_names: the other checkpoint is a GGUF, so this one is mapped to GGUF names.
Result<View> OpenView(const std::string& path, const VerifyOptions& o, bool gguf_names) {
  std::error_code ec;
  if (IsGgufFile(path)) return GgufView(path);
  if (fs::is_regular_file(fs::path(path) / "adapter_config.json", ec)) {
    if (gguf_names) return Status::Error(StrCat(path, ": a PEFT adapter cannot be compared with a GGUF model"));
    return SafetensorsView(path + "/adapter_model.safetensors", "PEFT adapter");
  }
  const std::string item_dir = OrbaxItemDir(path);
  const bool orbax = fs::exists(fs::path(item_dir) / "_METADATA", ec) || fs::exists(fs::path(item_dir) / "manifest.ocdbt", ec);
  if (!orbax) {
    return gguf_names ? GgufPlanView(path, "Hugging Face safetensors (mapped to GGUF names)")
                      : SafetensorsView(path, "Hugging Face safetensors");
  }
  GK_ASSIGN_OR_RETURN(std::unique_ptr<orbax::Item> item, orbax::Item::Open(item_dir));
  bool lora = false;
  for (const orbax::ArrayInfo& a : item->arrays()) lora |= a.name.find("_lora_a") != std::string::npos;
  if (o.config_dir.empty()) return Status::Error(StrCat(path, ": an Orbax tree needs --config (the Hugging Face config it belongs to)"));
  if (lora) {
    if (gguf_names) return Status::Error(StrCat(path, ": a Qwix LoRA cannot be compared with a GGUF model"));
    GK_ASSIGN_OR_RETURN(std::unique_ptr<LoraSource> src, OpenQwixLoraSource(item_dir, o.config_dir, o.alpha));
    auto shared = std::shared_ptr<LoraSource>(std::move(src));
    View v;
    v.format = "Qwix LoRA (Orbax)";
    for (const std::string& m : shared->Modules()) {
      GK_ASSIGN_OR_RETURN(LoraFactors f, shared->Factors(m));
      v.shapes[StrCat("base_model.model.", m, ".lora_A.weight")] = {f.rank, f.in};
      v.shapes[StrCat("base_model.model.", m, ".lora_B.weight")] = {f.out, f.rank};
    }
    v.read = [shared](const std::string& n) -> Result<std::vector<float>> {
      const bool is_a = n.ends_with(".lora_A.weight");
      const std::string m = n.substr(17, n.size() - 17 - 14);
      GK_ASSIGN_OR_RETURN(LoraFactors f, shared->Factors(m));
      return is_a ? f.a : f.b;
    };
    v.keep = shared;
    return v;
  }
  return TunixView(path, item_dir, o, gguf_names);
}

Result<std::string> ModelDirOf(const std::string& path, const VerifyOptions& o, std::vector<std::string>* cleanup) {
  std::error_code ec;
  const std::string item_dir = OrbaxItemDir(path);
  if (!fs::exists(fs::path(item_dir) / "_METADATA", ec)) return path;
  const std::string tmp = (fs::temp_directory_path() / StrCat("gk-verify-model-", getpid(), "-", cleanup->size())).string();
  fs::remove_all(tmp, ec);
  GK_RETURN_IF_ERROR(OrbaxToHf(item_dir, tmp, o.config_dir).status());
  cleanup->push_back(tmp);
  return tmp;
}

Result<std::vector<float>> ModelLogits(const std::string& dir, const std::vector<int32_t>& prompt) {
  ThreadPool pool(0);
  GK_ASSIGN_OR_RETURN(std::unique_ptr<GemmaModel> m, GemmaModel::Load(dir, &pool));
  KvCache cache = m->NewKvCache(int64_t(prompt.size()));
  std::vector<float> logits(prompt.size() * size_t(m->config().vocab_size));
  GK_RETURN_IF_ERROR(m->Forward(prompt, cache, LogitsMode::kAll, logits.data()));
  return logits;
}

}  // namespace

Result<VerifyReport> VerifyCheckpoints(const std::string& a, const std::string& b, const VerifyOptions& o) {
  const bool gguf = IsGgufFile(a) || IsGgufFile(b);
  if (gguf && o.logits) return Status::Error("--logits: gemmakit's engine does not load GGUF; compare the tensors without --logits");
  GK_ASSIGN_OR_RETURN(View va, OpenView(a, o, gguf));
  GK_ASSIGN_OR_RETURN(View vb, OpenView(b, o, gguf));
  VerifyReport rep;
  rep.format_a = va.format;
  rep.format_b = vb.format;
  std::map<std::string, int> names;
  for (const auto& [n, s] : va.shapes) names[n] |= 1;
  for (const auto& [n, s] : vb.shapes) names[n] |= 2;
  for (const auto& [n, which] : names) {
    TensorDiff d;
    d.name = n;
    if (which != 3) {
      d.problem = which == 1 ? "only in A" : "only in B";
      (which == 1 ? rep.only_a : rep.only_b)++;
    } else if (va.shapes[n] != vb.shapes[n]) {
      d.problem = "different shapes";
      ++rep.mismatched;
    } else {
      GK_ASSIGN_OR_RETURN(std::vector<float> x, va.read(n));
      GK_ASSIGN_OR_RETURN(std::vector<float> y, vb.read(n));
      double scale = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        d.max_abs = std::max(d.max_abs, std::abs(double(x[i]) - double(y[i])));
        scale = std::max(scale, std::abs(double(y[i])));
      }
      d.max_rel = scale > 0 ? d.max_abs / scale : d.max_abs;
      rep.max_abs = std::max(rep.max_abs, d.max_abs);
      rep.max_rel = std::max(rep.max_rel, d.max_rel);
    }
    rep.tensors.push_back(std::move(d));
  }
  if (o.logits) {
    std::vector<std::string> cleanup;
    auto run = [&]() -> Status {
      GK_ASSIGN_OR_RETURN(std::string da, ModelDirOf(a, o, &cleanup));
      GK_ASSIGN_OR_RETURN(std::string db, ModelDirOf(b, o, &cleanup));
      GK_ASSIGN_OR_RETURN(std::vector<float> la, ModelLogits(da, o.prompt));
      GK_ASSIGN_OR_RETURN(std::vector<float> lb, ModelLogits(db, o.prompt));
      if (la.size() != lb.size()) return Status::Error("--logits: the two models have different vocabularies");
      double scale = 0;
      for (size_t i = 0; i < la.size(); ++i) {
        rep.logits_max_abs = std::max(rep.logits_max_abs, std::abs(double(la[i]) - double(lb[i])));
        scale = std::max(scale, std::abs(double(lb[i])));
      }
      rep.logits_max_rel = scale > 0 ? rep.logits_max_abs / scale : rep.logits_max_abs;
      rep.logits_compared = true;
      return Status::Ok();
    };
    Status s = run();
    std::error_code ec;
    for (const std::string& d : cleanup) fs::remove_all(d, ec);
    GK_RETURN_IF_ERROR(s);
  }
  return rep;
}

}  // namespace gk::bridge
