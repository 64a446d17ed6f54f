#include "model/train/lora_tensor_parallel.h"

#include <algorithm>

#include "dist/communicator.h"

namespace gk {
namespace {

bool ColumnParallel(LoraTarget t) { return t != LoraTarget::kO && t != LoraTarget::kDown; }

// The slice of module m's projection weight for `rank`: rows (column-parallel) or columns.
TensorSlice ModuleSlice(const LoraModule& m, const ModelConfig& full, const TensorParallel& tp) {
  return SliceForRank(m.name + ".weight", {m.out, m.in}, full, tp.size, tp.rank);
}

// dst (local shape) ← the slice of src (whole shape) for a factor: B's rows [begin, begin + n)
// of r columns, or A's columns [begin, begin + n) of `rows` rows.
void CopyRows(const std::vector<float>& src, int64_t begin, int64_t n, int64_t width, std::vector<float>* dst) {
  dst->assign(src.begin() + begin * width, src.begin() + (begin + n) * width);
}
void CopyCols(const std::vector<float>& src, int64_t rows, int64_t width, int64_t begin, int64_t n,
              std::vector<float>* dst) {
  dst->resize(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src.begin() + r * width + begin, src.begin() + r * width + begin + n, dst->begin() + r * n);
  }
}

// Whether this rank's copy of module m's A (B) counts as the whole model's: a rank's own slice
// always; a part every rank of the group holds (or, for replicated KV heads, every rank
// sharing the head) only on the first of them.
struct Owned {
  bool a = true, b = true;
};
Owned OwnedParts(const LoraModule& m, const ModelConfig& full, const TensorParallel& tp) {
  const TensorSlice s = ModuleSlice(m, full, tp);
  Owned o;
  if (s.kind == TensorSlice::Kind::kRows) {
    o.a = tp.rank == 0;
    const int K = full.KvHeads(m.layer);
    if ((m.target == LoraTarget::kK || m.target == LoraTarget::kV) && K < tp.size) o.b = tp.rank % (tp.size / K) == 0;
  } else if (s.kind == TensorSlice::Kind::kCols) {
    o.b = tp.rank == 0;
  } else {
    o.a = o.b = tp.rank == 0;
  }
  return o;
}

}  // namespace

Status SliceLoraAdapter(const LoraAdapter& whole, const ModelConfig& full, const TensorParallel& tp,
                        LoraAdapter* local) {
  if (whole.modules().size() != local->modules().size() || whole.rank() != local->rank()) {
    return Status::Error("tensor parallel: the adapter share has other modules than the whole adapter");
  }
  const int64_t r = whole.rank();
  for (size_t i = 0; i < whole.modules().size(); ++i) {
    const LoraModule& w = whole.modules()[i];
    LoraModule& l = local->modules()[i];
    if (w.name != l.name) return Status::Error(StrCat("tensor parallel: adapter module ", l.name, " is not ", w.name));
    const TensorSlice s = ModuleSlice(w, full, tp);
    const bool rows = s.kind == TensorSlice::Kind::kRows, cols = s.kind == TensorSlice::Kind::kCols;
    if ((rows && s.count != l.out) || (cols && s.count != l.in)) {
      return Status::Error(StrCat("tensor parallel: adapter module ", l.name, " has the wrong shape for rank ", tp.rank));
    }
    auto slice = [&](const std::vector<float>& a, const std::vector<float>& b, std::vector<float>* la,
                     std::vector<float>* lb) {
      if (a.empty()) return;
      if (rows) {  // B's rows, A whole
        *la = a;
        CopyRows(b, s.begin, s.count, r, lb);
      } else if (cols) {  // A's columns, B whole
        CopyCols(a, r, w.in, s.begin, s.count, la);
        *lb = b;
      } else {
        *la = a, *lb = b;
      }
    };
    slice(w.a, w.b, &l.a, &l.b);
    slice(w.grad_a, w.grad_b, &l.grad_a, &l.grad_b);
  }
  return Status::Ok();
}

Status GatherLoraAdapter(const LoraAdapter& local, const ModelConfig& full, const TensorParallel& tp,
                         LoraAdapter* whole) {
  if (whole->modules().size() != local.modules().size()) {
    return Status::Error("tensor parallel: the whole adapter has other modules than the share");
  }
  const int64_t r = local.rank();
  std::vector<std::span<float>> parts;
  for (size_t i = 0; i < local.modules().size(); ++i) {
    const LoraModule& l = local.modules()[i];
    LoraModule& w = whole->modules()[i];
    if (w.a.size() != size_t(r * w.in) || w.b.size() != size_t(w.out * r)) {
      return Status::Error(StrCat("tensor parallel: whole adapter module ", w.name, " has the wrong shape"));
    }
    std::fill(w.a.begin(), w.a.end(), 0.f);
    std::fill(w.b.begin(), w.b.end(), 0.f);
    parts.push_back(w.a);
    parts.push_back(w.b);
    const TensorSlice s = ModuleSlice(w, full, tp);
    const Owned own = OwnedParts(w, full, tp);
    if (s.kind == TensorSlice::Kind::kCols) {  // A's columns
      for (int64_t row = 0; row < r; ++row) {
        std::copy(l.a.begin() + row * l.in, l.a.begin() + (row + 1) * l.in, w.a.begin() + row * w.in + s.begin);
      }
    } else if (own.a) {
      std::copy(l.a.begin(), l.a.end(), w.a.begin());
    }
    if (s.kind == TensorSlice::Kind::kRows) {  // B's rows
      if (own.b) std::copy(l.b.begin(), l.b.end(), w.b.begin() + s.begin * r);
    } else if (own.b) {
      std::copy(l.b.begin(), l.b.end(), w.b.begin());
    }
  }
  if (!tp.active()) return Status::Ok();
  std::vector<float> scratch;
  return dist::AllReduceSumAll(*tp.comm, parts, &scratch);
}

Result<double> LoraGradSquaredNorm(const LoraAdapter& local, const ModelConfig& full, const TensorParallel& tp) {
  double sum = 0;
  for (const LoraModule& m : local.modules()) {
    const Owned own = tp.active() ? OwnedParts(m, full, tp) : Owned{};
    for (auto [grad, counted] : {std::pair{&m.grad_a, own.a}, std::pair{&m.grad_b, own.b}}) {
      if (!counted) continue;
      for (float g : *grad) sum += double(g) * double(g);
    }
  }
  if (tp.active()) GK_RETURN_IF_ERROR(tp.comm->AllReduceSum(std::span<double>(&sum, 1)));
  return sum;
}

Status ReduceLoraGradsOverTp(LoraAdapter& local, const ModelConfig& full, const TensorParallel& tp) {
  if (!tp.active()) return Status::Ok();
  const int64_t r = local.rank();
  std::vector<std::span<float>> parts;
  std::vector<std::vector<float>> replicated;  // k/v B gradients in the whole model's layout
  std::vector<std::pair<LoraModule*, int64_t>> replicated_at;  // module, first row in that layout
  replicated.reserve(local.modules().size());
  for (LoraModule& m : local.modules()) {
    if (!ColumnParallel(m.target)) continue;
    parts.push_back(m.grad_a);
    const int K = full.KvHeads(m.layer);
    if ((m.target == LoraTarget::kK || m.target == LoraTarget::kV) && K < tp.size) {
      const int64_t H = full.HeadDim(m.layer), first = int64_t(FirstKvHead(K, tp.size, tp.rank)) * H;
      std::vector<float>& buf = replicated.emplace_back(size_t(K * H * r), 0.f);
      std::copy(m.grad_b.begin(), m.grad_b.end(), buf.begin() + first * r);
      parts.push_back(buf);
      replicated_at.emplace_back(&m, first);
    }
  }
  std::vector<float> scratch;
  GK_RETURN_IF_ERROR(dist::AllReduceSumAll(*tp.comm, parts, &scratch));
  for (size_t i = 0; i < replicated_at.size(); ++i) {
    auto [m, first] = replicated_at[i];
    std::copy(replicated[i].begin() + first * r, replicated[i].begin() + first * r + int64_t(m->grad_b.size()),
              m->grad_b.begin());
  }
  return Status::Ok();
}

}  // namespace gk
