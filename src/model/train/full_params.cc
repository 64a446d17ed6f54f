#include "model/train/full_params.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "formats/checkpoint_side_files.h"
#include "formats/safetensors.h"
#include "util/atomic_file.h"

namespace gk {
namespace {

// Writes n masters into storage of `dtype` (round to nearest even for bf16).
void Store(const float* src, int64_t n, DType dtype, void* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, sizeof(float) * size_t(n));
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
  }
}

}  // namespace

Result<FullParams> FullParams::Create(const std::string& model_dir, const ModelConfig& c, ModelWeights* w) {
  if (w->mmapped) return Status::Error("full fine-tuning: load the weights into memory (WeightLoadMode::kCopy)");
  GK_ASSIGN_OR_RETURN(SafetensorsSet set, SafetensorsSet::Open(model_dir));
  FullParams out;
  // Slots pointing into *w (the layer vector keeps its size, so nothing moves).
  for (const WeightSlot& s : WeightSlots(c, w->prefix, w)) {
    if (s.kind == WeightKind::kScalar) continue;  // layer_scalar: a buffer in transformers
    FullParam p;
    p.name = s.name;
    p.shape = s.shape;
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    p.value.resize(size_t(n));
    p.grad.assign(size_t(n), 0.f);
    if (s.matrix || s.experts) {
      const MatrixView& first = s.matrix ? *s.matrix : s.experts->front();
      const TensorInfo* t = set.Find(s.name);
      if (first.packed || !t || t->dtype != first.dtype ||
          (first.dtype != DType::kF32 && first.dtype != DType::kBF16)) {
        return Status::Error(StrCat("full fine-tuning: ", s.name, " is ",
                                    first.packed ? "packed" : DTypeName(t ? t->dtype : first.dtype),
                                    "; train a bf16 or f32 checkpoint, loaded unpacked"));
      }
      p.dtype = first.dtype;
      p.matrix = s.matrix;
      p.experts = s.experts;
      const int64_t rows = s.matrix ? s.matrix->rows : int64_t(s.experts->size()) * first.rows;
      for (int64_t r = 0; r < rows; ++r) first.RowToF32(r, p.value.data() + r * first.cols);  // contiguous stack
    } else {
      const TensorInfo* t = set.Find(s.name);
      if (!t) return Status::Error(StrCat(model_dir, ": tensor ", s.name, " is missing"));
      std::vector<uint8_t> raw(t->nbytes);
      GK_RETURN_IF_ERROR(set.ReadInto(*t, raw.data()));
      WidenToF32(t->dtype, raw.data(), t->numel(), p.value.data());
      if (t->dtype != DType::kF32 && t->dtype != DType::kBF16) {
        return Status::Error(StrCat("full fine-tuning: ", s.name, " is ", DTypeName(t->dtype),
                                    "; train a bf16 or f32 checkpoint"));
      }
      p.dtype = t->dtype;
      p.vec = s.vec;
      p.add = s.add;
    }
    out.params_.push_back(std::move(p));
  }
  for (FullParam& p : out.params_) {
    float* g = p.grad.data();
    if (p.matrix) out.grad_of_[p.matrix] = g;
    if (p.vec) out.grad_of_[p.vec] = g;
    if (p.experts) {
      for (MatrixView& m : *p.experts) {
        out.grad_of_[&m] = g;
        g += m.rows * m.cols;
      }
    }
  }
  return out;
}

float* FullParams::Grad(const void* weight) const {
  auto it = grad_of_.find(weight);
  return it == grad_of_.end() ? nullptr : it->second;
}

void FullParams::ZeroGrads() {
  for (FullParam& p : params_) std::fill(p.grad.begin(), p.grad.end(), 0.f);
}

void FullParams::Sync(ThreadPool& pool) {
  pool.ParallelFor(int64_t(params_.size()), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      FullParam& p = params_[size_t(i)];
      if (p.matrix || p.experts) {
        // The trainer loaded these bytes into memory it owns (kCopy): writing them is its right.
        void* dst = const_cast<void*>(p.matrix ? p.matrix->data : p.experts->front().data);
        Store(p.value.data(), p.numel(), p.dtype, dst);
      } else {
        for (int64_t j = 0; j < p.numel(); ++j) {
          const float v = p.dtype == DType::kBF16 ? RoundToBf16(p.value[size_t(j)]) : p.value[size_t(j)];
          (*p.vec)[size_t(j)] = v + p.add;
        }
      }
    }
  });
}

int64_t FullParams::ParameterCount() const {
  int64_t n = 0;
  for (const FullParam& p : params_) n += p.numel();
  return n;
}

Status FullParams::WriteCheckpoint(const std::string& source_dir, const std::string& out_dir) const {
  namespace fs = std::filesystem;
  GK_ASSIGN_OR_RETURN(SafetensorsSet base, SafetensorsSet::Open(source_dir));
  std::map<std::string, const FullParam*> by_name;
  for (const FullParam& p : params_) by_name[p.name] = &p;
  std::error_code ec;
  const std::string tmp = StrCat(out_dir, ".tmp-", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::Error(StrCat(tmp, ": cannot create: ", ec.message()));
  auto fail = [&](Status s) {
    fs::remove_all(tmp, ec);
    return s;
  };
  for (const auto& file : base.files()) {
    std::vector<const TensorInfo*> order;
    for (const TensorInfo& t : file->tensors()) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    std::vector<TensorSpec> specs;
    for (const TensorInfo* t : order) {
      auto it = by_name.find(t->name);
      if (it == by_name.end()) {
        const SafetensorsFile* f = file.get();
        specs.push_back({t->name, t->dtype, t->shape, [f, t](uint8_t* dst, size_t) { return f->ReadInto(*t, dst); }});
        continue;
      }
      const FullParam* p = it->second;
      if (t->dtype != p->dtype) {
        return fail(Status::Error(StrCat(source_dir, ": ", t->name, " is ", DTypeName(t->dtype), ", trained as ",
                                         DTypeName(p->dtype))));
      }
      specs.push_back({t->name, t->dtype, t->shape, [p](uint8_t* dst, size_t) {
                         Store(p->value.data(), p->numel(), p->dtype, dst);
                         return Status::Ok();
                       }});
    }
    const std::string name = fs::path(file->path()).filename().string();
    if (Status s = WriteSafetensors(tmp + "/" + name, specs, file->metadata()); !s.ok()) return fail(s);
  }
  if (Status s = CopyCheckpointSideFiles(source_dir, tmp, /*keep_index=*/true); !s.ok()) return fail(s);
  if (Status s = FsyncDir(tmp); !s.ok()) return fail(s);
  // The old directory goes aside first: a kill between the renames leaves it there, never a
  // half-written one under out_dir.
  const std::string old = StrCat(out_dir, ".old-", getpid());
  fs::remove_all(old, ec);
  const bool had_old = fs::exists(out_dir, ec);
  if (had_old) {
    fs::rename(out_dir, old, ec);
    if (ec) return fail(Status::Error(StrCat("renaming ", out_dir, " aside: ", ec.message())));
  }
  fs::rename(tmp, out_dir, ec);
  if (ec) return fail(Status::Error(StrCat("renaming ", tmp, " to ", out_dir, ": ", ec.message())));
  const std::string parent = fs::absolute(out_dir, ec).parent_path().string();
  GK_RETURN_IF_ERROR(FsyncDir(parent));
  if (had_old) fs::remove_all(old, ec);
  return Status::Ok();
}

}  // namespace gk
