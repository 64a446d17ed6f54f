#include "model/quantize.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "formats/checkpoint_side_files.h"
#include "model/config.h"
#include "tensor/q8_0.h"
#include "tensor/thread_pool.h"
#include "util/anonymous_memory.h"

namespace gk {
namespace {

constexpr char kMetadataKey[] = "gemmakit.quantization";

uint64_t Align64(uint64_t n) { return (n + 63) / 64 * 64; }


struct MatrixRef {
  MatrixView* m;
  bool quantize;
};

// Every matrix of the model, with whether it is to be quantized.
std::vector<MatrixRef> AllMatrices(ModelWeights* w) {
  std::vector<MatrixRef> all;
  auto add = [&](MatrixView& m, bool allowed) {
    if (m.empty()) return;
    all.push_back({&m, allowed && m.dtype != DType::kQ8_0 && Q8Supports(m.cols)});
  };
  add(w->embed, true);
  add(w->ple_embed, true);
  add(w->ple_model_proj, true);
  for (LayerWeights& l : w->layers) {
    for (MatrixView* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.ple_gate, &l.ple_proj}) add(*m, true);
    add(l.router, false);
    for (MatrixView& m : l.expert_gate_up) add(m, true);
    for (MatrixView& m : l.expert_down) add(m, true);
  }
  return all;
}

}  // namespace

Result<QuantType> ParseQuantType(std::string_view name) {
  if (name == "none") return QuantType::kNone;
  if (name == "q8_0") return QuantType::kQ8_0;
  return Result<QuantType>::Error(StrCat("unknown quantization '", name, "' (expected none or q8_0)"));
}

std::string_view QuantTypeName(QuantType type) { return type == QuantType::kQ8_0 ? "q8_0" : "none"; }

Status QuantizeWeights(ModelWeights* w, QuantType type) {
  if (type == QuantType::kNone) return Status::Ok();
  std::vector<MatrixRef> all = AllMatrices(w);
  uint64_t total = 0;
  for (const MatrixRef& r : all) {
    total += Align64(uint64_t(r.quantize ? Q8Bytes(r.m->rows, r.m->cols) : r.m->bytes()));
  }
  auto storage = AllocateAnonymous(total);
  if (!storage) return Status::Error(StrCat("cannot allocate ", total, " bytes for the quantized weights"));
  uint8_t* cursor = static_cast<uint8_t*>(storage.get());
  ThreadPool pool(0);
  uint64_t matrix_bytes = 0;
  for (const MatrixRef& r : all) {
    MatrixView& m = *r.m;
    if (r.quantize) {
      pool.ParallelForDynamic(Q8Panels(m.rows), 64, [&](int64_t p0, int64_t p1, int) {
        QuantizePanelsQ8(m, p0, p1, cursor);
      });
      m = MatrixView{DType::kQ8_0, m.rows, m.cols, cursor};
    } else {  // kept as it is, moved so the old storage can go
      std::memcpy(cursor, m.data, size_t(m.bytes()));
      m.data = cursor;
    }
    cursor += Align64(uint64_t(m.bytes()));
    matrix_bytes += uint64_t(m.bytes());
  }
  w->matrix_bytes = matrix_bytes;
  w->storage = std::move(storage);
  w->mmapped = false;
  return Status::Ok();
}

Status WriteQuantizedCheckpoint(const std::string& model_dir, const std::string& out_dir, QuantType type,
                                ConversionProgress* progress) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (type == QuantType::kNone) return Status::Error("quantize: give a quantization type (q8_0)");
  if (fs::exists(out_dir) && fs::equivalent(model_dir, out_dir, ec)) {
    return Status::Error(StrCat("quantize: --out ", out_dir, " is the model directory; write to a new directory"));
  }
  GK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  GK_ASSIGN_OR_RETURN(ModelWeights w, LoadWeights(model_dir, config, WeightLoadMode::kMmap));
  GK_RETURN_IF_ERROR(QuantizeWeights(&w, type));
  GK_ASSIGN_OR_RETURN(SafetensorsSet set, SafetensorsSet::Open(model_dir));
  GK_ASSIGN_OR_RETURN(std::string prefix, DetectWeightPrefix(set, model_dir));
  std::set<std::string> ignored;
  const std::vector<WeightSlot> slots = WeightSlots(config, prefix, &w, &ignored);
  std::map<std::string, const WeightSlot*> by_name;
  for (const WeightSlot& s : slots) by_name[s.name] = &s;

  std::vector<TensorSpec> specs;
  std::set<std::string> written;
  for (const std::string& name : set.Names()) {
    const TensorInfo& t = *set.Find(name);
    std::vector<const MatrixView*> views;
    if (auto it = by_name.find(name); it != by_name.end()) {
      if (it->second->matrix) views.push_back(it->second->matrix);
      if (it->second->experts) {
        for (const MatrixView& m : *it->second->experts) views.push_back(&m);
      }
    }
    const bool q8 = !views.empty() && std::all_of(views.begin(), views.end(), [](const MatrixView* m) {
      return m->dtype == DType::kQ8_0;
    });
    if (!q8) continue;
    const int64_t rows = views[0]->rows, cols = views[0]->cols;
    const size_t per = size_t(rows * cols), per_scales = size_t(rows * cols / kQ8BlockCols);
    TensorSpec codes{name, DType::kI8, t.shape, [views, per](uint8_t* dst, size_t) {
                       for (size_t e = 0; e < views.size(); ++e) {
                         UnpackQ8(*views[e], reinterpret_cast<int8_t*>(dst) + e * per, nullptr);
                       }
                       return Status::Ok();
                     }};
    std::vector<int64_t> scale_shape = t.shape;
    scale_shape.back() /= kQ8BlockCols;
    TensorSpec scales{Q8ScaleName(name), DType::kF16, scale_shape, [views, per_scales](uint8_t* dst, size_t) {
                        for (size_t e = 0; e < views.size(); ++e) {
                          UnpackQ8(*views[e], nullptr, reinterpret_cast<uint16_t*>(dst) + e * per_scales);
                        }
                        return Status::Ok();
                      }};
    written.insert(codes.name);
    written.insert(scales.name);
    specs.push_back(std::move(codes));
    specs.push_back(std::move(scales));
  }
  // Everything else as it is in the source (norms, kept matrices, unused or skipped tensors).
  for (const std::string& name : set.Names()) {
    if (written.count(name)) continue;
    const TensorInfo t = *set.Find(name);
    const SafetensorsSet* src = &set;
    specs.push_back(TensorSpec{name, t.dtype, t.shape,
                               [src, t](uint8_t* dst, size_t) { return src->ReadInto(t, dst); }});
  }
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Error(StrCat("cannot create ", out_dir, ": ", ec.message()));
  std::function<void(const std::string&)> on_file;
  if (progress) {
    uint64_t bytes = 0;
    for (TensorSpec& sp : specs) {
      int64_t n = 1;
      for (int64_t d : sp.shape) n *= d;
      bytes += uint64_t(n) * DTypeSize(sp.dtype);
      sp.fill = progress->Track(std::move(sp.fill));
    }
    progress->AddWork(bytes, int64_t(specs.size()));
    on_file = [progress](const std::string& path) { progress->FileDone(path); };
  }
  GK_RETURN_IF_ERROR(WriteSafetensorsDir(out_dir, specs, 5ull << 30,
                                         {{"format", "pt"}, {kMetadataKey, std::string(QuantTypeName(type))}}, on_file));
  // config.json, generation_config.json, tokenizer files, ...: copied.
  return CopyCheckpointSideFiles(model_dir, out_dir, /*keep_index=*/false);
}

std::string Q8ScaleName(const std::string& tensor_name) { return tensor_name + "_scale"; }

Status CheckQ8Tensor(const SafetensorsSet& set, const TensorInfo& codes, const std::string& dir) {
  const std::vector<int64_t>& shape = codes.shape;
  if (shape.size() < 2 || shape.size() > 3 || !Q8Supports(shape.back())) {
    return Status::Error(StrCat(dir, ": int8 tensor ", codes.name, " must be a matrix (or a stack of them) whose width",
                                " is a multiple of ", kQ8BlockCols, " (Q8_0 blocks)"));
  }
  const std::string scale_name = Q8ScaleName(codes.name);
  const TensorInfo* s = set.Find(scale_name);
  if (!s) {
    return Status::Error(StrCat(dir, ": int8 tensor ", codes.name, " has no ", scale_name,
                                " tensor of block scales (Q8_0 checkpoints are written by gemmakit quantize)"));
  }
  std::vector<int64_t> want = shape;
  want.back() /= kQ8BlockCols;
  if (s->shape != want || (s->dtype != DType::kF16 && s->dtype != DType::kF32)) {
    std::string got, expected;
    for (int64_t v : s->shape) got += StrCat(got.empty() ? "" : ", ", v);
    for (int64_t v : want) expected += StrCat(expected.empty() ? "" : ", ", v);
    return Status::Error(StrCat(dir, ": ", scale_name, " is ", DTypeName(s->dtype), " [", got,
                                "]; expected F16 or F32 [", expected, "] (one scale per ", kQ8BlockCols,
                                " int8 values)"));
  }
  return Status::Ok();
}

uint64_t Q8TensorBytes(const std::vector<int64_t>& shape) {
  const size_t n = shape.size();
  const int64_t stack = n == 3 ? shape[0] : 1;
  return Align64(uint64_t(stack * Q8Bytes(shape[n - 2], shape[n - 1])));
}

Status ReadQ8Tensor(const SafetensorsSet& set, const TensorInfo& codes, const WeightSlot& x, uint8_t* dst) {
  const TensorInfo& s = *set.Find(Q8ScaleName(codes.name));
  const size_t n = codes.shape.size();
  const int64_t stack = n == 3 ? codes.shape[0] : 1, rows = codes.shape[n - 2], cols = codes.shape[n - 1];
  std::vector<int8_t> q(static_cast<size_t>(codes.nbytes));
  GK_RETURN_IF_ERROR(set.ReadInto(codes, q.data()));
  std::vector<uint16_t> scales(static_cast<size_t>(s.numel()));
  if (s.dtype == DType::kF16) {
    GK_RETURN_IF_ERROR(set.ReadInto(s, scales.data()));
  } else {  // f32 scales: the layout keeps f16
    std::vector<float> f(static_cast<size_t>(s.numel()));
    GK_RETURN_IF_ERROR(set.ReadInto(s, f.data()));
    for (size_t i = 0; i < f.size(); ++i) scales[i] = F32ToF16(f[i]);
  }
  const int64_t per = Q8Bytes(rows, cols), nb = cols / kQ8BlockCols;
  for (int64_t e = 0; e < stack; ++e) {
    uint8_t* d = dst + e * per;
    PackPanelsQ8(q.data() + e * rows * cols, scales.data() + e * rows * nb, rows, cols, 0, Q8Panels(rows), d);
    const MatrixView view{DType::kQ8_0, rows, cols, d};
    if (x.matrix) {
      *x.matrix = view;
    } else {
      x.experts->push_back(view);
    }
  }
  return Status::Ok();
}

}  // namespace gk
