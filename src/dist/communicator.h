// Collective operations across processes, free of MPI types: the seam between the engines
// (data-parallel gradients now, tensor-parallel activations next) and the transport. MPI
// implements it across processes and machines (mpi_communicator.cc), NCCL will for the CUDA
// backend, and a single process gets the trivial implementation, so engines call the same
// code with or without `mpirun`.
//
// Every rank must call the same collectives in the same order with the same sizes (the MPI
// rule). Sums are in the element type; gradients are summed in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/result.h"

namespace gk::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single process", "MPI (Open MPI 4.1.4)"
  // A new group of the ranks that pass the same color (a collective over this group), ranked
  // by key: the tensor-parallel and data-parallel groups of a tp x dp grid.
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key) = 0;

  // In place: x ← Σ over ranks of x.
  virtual Status AllReduceSum(std::span<float> x) = 0;
  virtual Status AllReduceSum(std::span<double> x) = 0;
  // In place: x ← max over ranks of x (flags, counters).
  virtual Status AllReduceMax(std::span<int64_t> x) = 0;
  // out (size() · in.size() values) ← every rank's `in`, rank 0's first.
  virtual Status AllGather(std::span<const float> in, std::span<float> out) = 0;
  // The same into root's `out` only (the other ranks' out is not touched and may be empty).
  virtual Status Gather(std::span<const float> in, std::span<float> out, int root) = 0;
  // in holds size() blocks of out.size() values; out ← Σ over ranks of block rank().
  virtual Status ReduceScatterSum(std::span<const float> in, std::span<float> out) = 0;
  // data ← root's data (the same size on every rank).
  virtual Status Broadcast(std::span<std::byte> data, int root) = 0;
  virtual Status Barrier() = 0;
  // Ends every rank with `code` (a rank that failed alone would leave the others waiting in
  // their next collective). Single process: exits.
  [[noreturn]] virtual void Abort(int code) = 0;

  // Payload bytes this rank has handed to collectives (for "bytes communicated per step").
  int64_t bytes_communicated() const { return bytes_; }

 protected:
  void Count(size_t bytes) { bytes_ += int64_t(bytes); }

 private:
  int64_t bytes_ = 0;
};

// One process: every collective is the identity.
std::unique_ptr<Communicator> SingleProcessCommunicator();

// True when this process was started by an MPI launcher (mpirun / mpiexec / srun set the
// variables): then World() is MPI's, else the single-process one.
bool LaunchedByMpi();

// The process-wide communicator over all ranks; initialised on first use (MPI_Init), finalised
// at exit. An error when launched by mpirun in a build without MPI.
Result<Communicator*> World();

// A string from `root` to every rank (its length first).
Status BroadcastString(Communicator& comm, std::string* s, int root);

// For collectives inside a forward or backward pass, which has no way to stop on one rank
// alone (the others would wait forever in the next collective): on an error, prints it as
// `what` failed and ends every rank.
void OrAbort(Communicator& comm, const Status& status, const char* what);

// Every buffer summed over the ranks, in one all-reduce through `scratch` (one call for many
// small gradients instead of one each).
Status AllReduceSumAll(Communicator& comm, std::span<const std::span<float>> buffers, std::vector<float>* scratch);

}  // namespace gk::dist
