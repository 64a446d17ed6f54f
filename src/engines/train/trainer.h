// `gemmakit train`: LoRA supervised fine-tuning of a Hugging Face checkpoint on a prepared
// data set (formats/token_dataset.h), following a recipe (recipe.h).
//
// A step: the step's rows (data_order.h) in micro-batches through TrainingModel, gradients
// accumulated; loss = Σ token losses / targets of the whole effective batch (every target
// token of the step weighs the same, however the rows split into micro-batches or how long
// each row is — docs/TRAIN.md "Loss"); optional global-norm clipping; AdamW at the step's
// warmup-cosine rate.
//
// The run directory holds:
//   metrics.jsonl          one line per optimizer step (loss, lr, grad norm, accuracy, tokens,
//                          tokens/s, elapsed)
//   checkpoint-<step>/     every save_every steps, the last keep_last kept (checkpoint.h)
//   adapter/               the final adapter (PEFT layout)
//   training_run.json      config, data counts, parameters, hardware, wall time, throughput
// Resume: the newest complete checkpoint restores adapter, moments and step; the data order
// and dropout masks are functions of (seed, step), so the resumed run logs bit for bit the
// losses an uninterrupted one would have (same machine, same thread count).
// Stop: when *stop becomes true (SIGTERM), the step in progress is abandoned, a checkpoint of
// the last completed step is written, and Run returns with stopped() true.
//
// Data parallel (a communicator of N > 1 ranks, `mpirun -np N gemmakit train`): every rank
// holds the whole model and adapter; a step's micro-batches are dealt round-robin to the ranks
// (micro-batch j to rank j mod N), the gradients and loss sums are all-reduced once per step,
// and every rank takes the same AdamW step, so the run equals one process's up to the order of
// the sums. Rank 0 alone writes the run directory (metrics, checkpoints, adapter); the other
// ranks start from rank 0's state (also when resuming); a stop is agreed between micro-batches
// so that every rank leaves at the same one. A checkpoint resumes only with its world size.
//
// Tensor parallel (tp > 1, `mpirun -np T·D gemmakit train --tp T`, LoRA): each group of T
// consecutive ranks runs the same micro-batches on its share of the model and adapter
// (model/train/lora_tensor_parallel.h); the D groups are data parallel as above. Checkpoints
// and the final adapter are put back together in the whole model's layout for rank 0 to write.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "engines/train/recipe.h"
#include "kernels/device.h"
#include "tensor/thread_pool.h"
#include "util/result.h"

namespace gk::train {

struct StepLog {
  int64_t step = 0, total_steps = 0;  // step counts from 1
  int64_t epoch = 0;
  double loss = 0, learning_rate = 0, grad_norm = 0, accuracy = 0;
  int64_t tokens = 0, target_tokens = 0;
  double tokens_per_s = 0, elapsed_s = 0;
  nlohmann::json ToJson() const;
};

class Trainer {
 public:
  // dataset_dir: a `data prepare` directory. resume: continue from the newest complete
  // checkpoint in recipe.out (start fresh when there is none); without it, a run directory
  // that already has checkpoints is an error (nothing is overwritten).
  // comm: the ranks of a data-parallel run (nullptr: this process alone). Collective: every
  // rank calls it, and all fail when one does.
  // tp > 1: tensor parallel (LoRA): consecutive groups of tp ranks each hold one copy of the
  // model split tp ways (model/tensor_parallel.h); the comm's size must be a multiple of tp, and
  // the groups are data parallel to each other.
  // device: where the passes run (cuda:N: one GPU, LoRA, no data or tensor parallelism; the
  // optimizer and checkpoints stay on the host, so a run resumes on either device).
  static Result<std::unique_ptr<Trainer>> Create(const TrainRecipe& recipe, const std::string& dataset_dir,
                                                 ThreadPool* pool, bool resume, dist::Communicator* comm = nullptr,
                                                 int tp = 1, const DeviceSpec& device = DeviceSpec{});
  ~Trainer();

  // Runs to the last step (or until *stop). on_step is called after every step.
  Status Run(const std::atomic<bool>* stop, const std::function<void(const StepLog&)>& on_step);

  bool stopped() const;
  int64_t start_step() const;   // 0, or the checkpoint's step when resumed
  int64_t total_steps() const;
  const nlohmann::json& summary() const;  // training_run.json, after Run

  struct State;  // defined in trainer.cc

 private:
  explicit Trainer(std::unique_ptr<State> s);
  static Result<std::unique_ptr<Trainer>> CreateLocal(const TrainRecipe& recipe, const std::string& dataset_dir,
                                                      ThreadPool* pool, bool resume, std::unique_ptr<State> s);
  Status SyncFromRankZero();
  std::unique_ptr<State> s_;
};

}  // namespace gk::train
