// MPI_COMM_WORLD behind the Communicator interface. MPI is initialised on first use and only
// when a launcher started the process (a plain `gemmakit train` never touches MPI), with
// MPI_THREAD_SERIALIZED: one thread at a time calls it (the engine thread). Errors come back
// as Status (MPI_ERRORS_RETURN), not as an abort.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "dist/communicator.h"

#ifdef GK_HAVE_MPI
#include <mpi.h>
#endif

namespace gk::dist {

#ifdef GK_HAVE_MPI
namespace {

// MPI counts are int: long buffers go in pieces.
constexpr size_t kMaxCount = size_t(1) << 30;

Status Check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Error(StrCat("MPI ", op, ": ", std::string(text, size_t(len))));
}

template <class T>
MPI_Datatype TypeOf();
template <>
MPI_Datatype TypeOf<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype TypeOf<double>() { return MPI_DOUBLE; }
template <>
MPI_Datatype TypeOf<int64_t>() { return MPI_INT64_T; }

class Mpi final : public Communicator {
 public:
  // comm: MPI_COMM_WORLD, or a communicator of Split's that this object then owns.
  explicit Mpi(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, size_t(len));
    v = v.substr(0, v.find_first_of(",\n"));
    backend_ = StrCat("MPI (", v, ")");
  }
  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return backend_; }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    GK_RETURN_IF_ERROR(Check(MPI_Comm_split(comm_, color, key, &part), "Comm_split"));
    MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN);
    return std::unique_ptr<Communicator>(new Mpi(part));
  }

  Status AllReduceSum(std::span<float> x) override { return AllReduce(x, MPI_SUM); }
  Status AllReduceSum(std::span<double> x) override { return AllReduce(x, MPI_SUM); }
  Status AllReduceMax(std::span<int64_t> x) override { return AllReduce(x, MPI_MAX); }

  Status AllGather(std::span<const float> in, std::span<float> out) override {
    if (out.size() != in.size() * size_t(size_)) return Status::Error("AllGather: out must hold size() * in.size() values");
    if (in.size() > kMaxCount) return Status::Error("AllGather: more than 2^30 values per rank");
    Count(in.size_bytes());
    return Check(MPI_Allgather(in.data(), int(in.size()), MPI_FLOAT, out.data(), int(in.size()), MPI_FLOAT,
                               comm_),
                 "Allgather");
  }

  Status Gather(std::span<const float> in, std::span<float> out, int root) override {
    if (root < 0 || root >= size_) return Status::Error(StrCat("Gather: root ", root, " is not a rank of ", size_));
    if (rank_ == root && out.size() != in.size() * size_t(size_)) {
      return Status::Error("Gather: root's out must hold size() * in.size() values");
    }
    if (in.size() > kMaxCount) return Status::Error("Gather: more than 2^30 values per rank");
    Count(in.size_bytes());
    return Check(MPI_Gather(in.data(), int(in.size()), MPI_FLOAT, rank_ == root ? out.data() : nullptr, int(in.size()),
                            MPI_FLOAT, root, comm_),
                 "Gather");
  }

  Status ReduceScatterSum(std::span<const float> in, std::span<float> out) override {
    if (in.size() != out.size() * size_t(size_)) {
      return Status::Error("ReduceScatterSum: in must hold size() * out.size() values");
    }
    if (out.size() > kMaxCount) return Status::Error("ReduceScatterSum: more than 2^30 values per rank");
    Count(in.size_bytes());
    return Check(MPI_Reduce_scatter_block(in.data(), out.data(), int(out.size()), MPI_FLOAT, MPI_SUM, comm_),
                 "Reduce_scatter_block");
  }

  Status Broadcast(std::span<std::byte> data, int root) override {
    if (root < 0 || root >= size_) return Status::Error(StrCat("Broadcast: root ", root, " is not a rank of ", size_));
    Count(data.size());
    for (size_t off = 0; off < data.size(); off += kMaxCount) {
      const size_t n = std::min(kMaxCount, data.size() - off);
      GK_RETURN_IF_ERROR(Check(MPI_Bcast(data.data() + off, int(n), MPI_BYTE, root, comm_), "Bcast"));
    }
    return Status::Ok();
  }

  // Polled with short sleeps: a rank waiting here (e.g. while rank 0 measures alone) leaves
  // its core to the others instead of spinning in the MPI library.
  Status Barrier() override {
    MPI_Request request;
    GK_RETURN_IF_ERROR(Check(MPI_Ibarrier(comm_, &request), "Ibarrier"));
    for (;;) {
      int done = 0;
      GK_RETURN_IF_ERROR(Check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "Test"));
      if (done) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  [[noreturn]] void Abort(int code) override {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this tells the compiler so
  }

 private:
  template <class T>
  Status AllReduce(std::span<T> x, MPI_Op op) {
    Count(x.size_bytes());
    for (size_t off = 0; off < x.size(); off += kMaxCount) {
      const size_t n = std::min(kMaxCount, x.size() - off);
      GK_RETURN_IF_ERROR(Check(MPI_Allreduce(MPI_IN_PLACE, x.data() + off, int(n), TypeOf<T>(), op, comm_),
                               "Allreduce"));
    }
    return Status::Ok();
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::string backend_;
};

void Finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace
#endif  // GK_HAVE_MPI

Result<Communicator*> World() {
  static std::once_flag once;
  static std::unique_ptr<Communicator> world;
  static Status status = Status::Ok();
  std::call_once(once, [] {
    if (!LaunchedByMpi()) {
      world = SingleProcessCommunicator();
      return;
    }
#ifdef GK_HAVE_MPI
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      status = Status::Error("MPI_Init_thread failed");
      return;
    }
    std::atexit(Finalize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_SERIALIZED) {
      status = Status::Error("the MPI library does not allow calls from more than one thread (MPI_THREAD_SERIALIZED)");
      return;
    }
    world = std::make_unique<Mpi>();
#else
    status = Status::Error("started by an MPI launcher, but this gemmakit was built without MPI "
                           "(install libopenmpi-dev and rebuild)");
#endif
  });
  if (!status.ok()) return Result<Communicator*>::Error(status.message());
  return world.get();
}

}  // namespace gk::dist
