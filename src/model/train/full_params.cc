#include "model/train/full_params.h"

#include <cstring>

#include "formats/safetensors.h"

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
  const DType vec_dtype = w->checkpoint_dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
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
      if (first.packed || (first.dtype != DType::kF32 && first.dtype != DType::kBF16)) {
        return Status::Error(StrCat("full fine-tuning: ", s.name, " is ", first.packed ? "packed" : DTypeName(first.dtype),
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
      p.dtype = vec_dtype;
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

}  // namespace gk
