#include "tools/bridge/merge.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "formats/safetensors.h"
#include "kernels/gemm.h"
#include "tensor/dtype.h"
#include "formats/checkpoint_side_files.h"
#include "util/host_info.h"

namespace gk::bridge {
namespace {

namespace fs = std::filesystem;

// dst (rows × cols, dtype) += scaling · B·A, B (rows × r), A (r × cols), in f32 and rounded
// once: a block of rows is widened, sgemm adds the product into it (beta = 1), and it is
// rounded back. Blocks keep the f32 copy small next to the tensor.
Status AddDelta(uint8_t* dst, DType dtype, int64_t rows, int64_t cols, const LoraFactors& f, float scaling) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return Status::Error(StrCat("cannot merge into a ", DTypeName(dtype), " tensor (F32, BF16 or F16)"));
  }
  const size_t esize = DTypeSize(dtype);
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(4) << 20) / std::max<int64_t>(1, cols)));
  std::vector<float> w(size_t(block * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    uint8_t* part = dst + size_t(r0 * cols) * esize;
    WidenToF32(dtype, part, n * cols, w.data());
    Sgemm(false, false, n, cols, f.rank, scaling, f.b.data() + r0 * f.rank, f.rank, f.a.data(), cols, 1.f,
          w.data(), cols);
    NarrowFromF32(dtype, w.data(), n * cols, part);
  }
  return Status::Ok();
}

}  // namespace

Result<MergeReport> MergeLora(const std::string& base_dir, const LoraSource& lora, const std::string& out_dir,
                              ConversionProgress* progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  if (fs::exists(out_dir, ec)) return Status::Error(StrCat(out_dir, " already exists; not overwriting it"));
  GK_ASSIGN_OR_RETURN(SafetensorsSet base, SafetensorsSet::Open(base_dir));
  // Which base tensor each module merges into, checked before anything is written.
  std::map<std::string, std::string> module_of;  // tensor name -> module
  for (const std::string& m : lora.Modules()) {
    const std::string tensor = m + ".weight";
    const TensorInfo* t = base.Find(tensor);
    if (!t) return Status::Error(StrCat(lora.Describe(), ": module ", m, " has no tensor ", tensor, " in ", base_dir));
    if (t->shape.size() != 2) return Status::Error(StrCat(tensor, " is not a matrix"));
    module_of[tensor] = m;
  }
  const std::string tmp = StrCat(out_dir, ".tmp-", getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::Error(StrCat(tmp, ": cannot create: ", ec.message()));
  MergeReport rep;
  if (progress) {
    uint64_t bytes = 0;
    int64_t tensors = 0;
    for (const auto& f : base.files()) {
      for (const TensorInfo& t : f->tensors()) bytes += t.nbytes, ++tensors;
    }
    progress->AddWork(bytes, tensors);
  }
  for (size_t fi = 0; fi < base.files().size(); ++fi) {
    const SafetensorsFile& file = *base.files()[fi];
    std::vector<const TensorInfo*> order;
    for (const TensorInfo& t : file.tensors()) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    std::vector<TensorSpec> specs;
    for (size_t k = 0; k < order.size(); ++k) {
      const TensorInfo* t = order[k];
      const TensorInfo* next = k + 1 < order.size() ? order[k + 1] : nullptr;
      rep.largest_tensor_bytes = std::max<uint64_t>(rep.largest_tensor_bytes, t->nbytes);
      auto it = module_of.find(t->name);
      const std::string module = it == module_of.end() ? "" : it->second;
      specs.push_back({t->name, t->dtype, t->shape, [&file, t, next, module, &lora, &rep](uint8_t* dst, size_t n) -> Status {
                         GK_RETURN_IF_ERROR(file.ReadInto(*t, dst));
                         // The disk reads the next tensor while this one is merged and written.
                         if (next) file.Prefetch(*next);
                         if (module.empty()) return Status::Ok();
                         GK_ASSIGN_OR_RETURN(LoraFactors f, lora.Factors(module));
                         if (f.out != t->shape[0] || f.in != t->shape[1]) {
                           return Status::Error(StrCat(module, ": LoRA (", f.out, " × ", f.in, ") does not fit ",
                                                       t->name, " (", t->shape[0], " × ", t->shape[1], ")"));
                         }
                         ++rep.merged_tensors;
                         return AddDelta(dst, t->dtype, t->shape[0], t->shape[1], f, lora.scaling());
                       }});
      ++rep.tensors;
      rep.bytes_written += t->nbytes;
    }
    const std::string name = fs::path(file.path()).filename().string();
    if (progress) {
      for (TensorSpec& sp : specs) sp.fill = progress->Track(std::move(sp.fill));
    }
    Status s = WriteSafetensors(tmp + "/" + name, specs, file.metadata());
    if (!s.ok()) {
      fs::remove_all(tmp, ec);
      return s;
    }
    if (progress) progress->FileDone(StrCat(out_dir, "/", name));
    ++rep.files;
  }
  // Everything else of the checkpoint (config, tokenizer, index) as is.
  if (Status s = CopyCheckpointSideFiles(base_dir, tmp, /*keep_index=*/true); !s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  fs::rename(tmp, out_dir, ec);
  if (ec) return Status::Error(StrCat("renaming ", tmp, " to ", out_dir, ": ", ec.message()));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.peak_rss_bytes = PeakRssBytes();
  return rep;
}

}  // namespace gk::bridge
