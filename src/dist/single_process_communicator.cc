#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "dist/communicator.h"

namespace gk::dist {

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single process"; }
  Result<std::unique_ptr<Communicator>> Split(int, int) override {
    return std::unique_ptr<Communicator>(new SingleProcess());
  }
  Status AllReduceSum(std::span<float>) override { return Status::Ok(); }
  Status AllReduceSum(std::span<double>) override { return Status::Ok(); }
  Status AllReduceMax(std::span<int64_t>) override { return Status::Ok(); }
  Status AllGather(std::span<const float> in, std::span<float> out) override {
    if (out.size() != in.size()) return Status::Error("AllGather: out must hold size() * in.size() values");
    std::copy(in.begin(), in.end(), out.begin());
    return Status::Ok();
  }
  Status Gather(std::span<const float> in, std::span<float> out, int root) override {
    if (root != 0) return Status::Error(StrCat("Gather: root ", root, " is not a rank of 1"));
    return AllGather(in, out);
  }
  Status ReduceScatterSum(std::span<const float> in, std::span<float> out) override {
    if (in.size() != out.size()) return Status::Error("ReduceScatterSum: in must hold size() * out.size() values");
    std::copy(in.begin(), in.end(), out.begin());
    return Status::Ok();
  }
  Status Broadcast(std::span<std::byte>, int root) override {
    return root == 0 ? Status::Ok() : Status::Error(StrCat("Broadcast: root ", root, " is not a rank of 1"));
  }
  Status Barrier() override { return Status::Ok(); }
  [[noreturn]] void Abort(int code) override { std::exit(code); }
};

}  // namespace

std::unique_ptr<Communicator> SingleProcessCommunicator() { return std::make_unique<SingleProcess>(); }

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

void OrAbort(Communicator& comm, const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "gemmakit: error: %s failed: %s\n", what, status.message().c_str());
  comm.Abort(1);
}

Status BroadcastString(Communicator& comm, std::string* s, int root) {
  int64_t n = int64_t(s->size());
  GK_RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<int64_t>(&n, 1)), root));
  s->resize(size_t(n));
  return comm.Broadcast(std::as_writable_bytes(std::span<char>(s->data(), s->size())), root);
}

Status AllReduceSumAll(Communicator& comm, std::span<const std::span<float>> buffers, std::vector<float>* scratch) {
  scratch->clear();
  for (std::span<float> b : buffers) scratch->insert(scratch->end(), b.begin(), b.end());
  GK_RETURN_IF_ERROR(comm.AllReduceSum(std::span<float>(*scratch)));
  size_t at = 0;
  for (std::span<float> b : buffers) {
    std::copy(scratch->begin() + ptrdiff_t(at), scratch->begin() + ptrdiff_t(at + b.size()), b.begin());
    at += b.size();
  }
  return Status::Ok();
}

}  // namespace gk::dist
