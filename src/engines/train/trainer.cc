#include "engines/train/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "engines/train/adamw.h"
#include "engines/train/checkpoint.h"
#include "engines/train/data_order.h"
#include "engines/train/lr_schedule.h"
#include "formats/token_dataset.h"
#include "kernels/train_ops.h"
#include "model/config.h"
#include "model/train/full_params.h"
#include "model/train/lora.h"
#include "model/train/lora_tensor_parallel.h"
#include "model/train/training_memory.h"
#include "model/train/training_model.h"
#ifdef GK_HAVE_CUDA
#include "model/cuda/cuda_training_model.h"
#endif
#include "model/weights.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"
#include "util/host_info.h"
#include "util/progress.h"

namespace gk::train {

nlohmann::json StepLog::ToJson() const {
  return {{"step", step},
          {"epoch", epoch},
          {"loss", loss},
          {"learning_rate", learning_rate},
          {"grad_norm", grad_norm},
          {"accuracy", accuracy},
          {"tokens", tokens},
          {"target_tokens", target_tokens},
          {"tokens_per_s", tokens_per_s},
          {"elapsed_s", elapsed_s}};
}

// One buffer the optimizer updates: a LoRA factor, or a fully fine-tuned tensor's master.
struct Trainable {
  std::string name;  // its key in checkpoints (PEFT key, or the Hugging Face tensor name)
  std::vector<int64_t> shape;
  std::vector<float>* value = nullptr;
  std::vector<float>* grad = nullptr;
};

struct Trainer::State {
  TrainRecipe recipe;
  std::string dataset_dir;
  TokenDataset dataset;
  ModelConfig config;
  std::unique_ptr<LoraAdapter> adapter;
  std::unique_ptr<TrainRunner> model;
  DeviceSpec device;
  std::vector<Trainable> trainables;  // in optimizer order
  std::unique_ptr<AdamW> optimizer;
  WarmupCosineDecay schedule;
  std::unique_ptr<DataOrder> order;
  ThreadPool* pool = nullptr;
  std::unique_ptr<dist::Communicator> own_comm;  // the single-process one, when none was given
  dist::Communicator* world = nullptr;  // every rank: start-up agreement, stop flags
  dist::Communicator* comm = nullptr;   // the data-parallel group (the world without tensor parallelism)
  // Tensor parallelism (--tp): this rank's group (world ranks k·tp ... k·tp + tp − 1), the
  // data-parallel group of its position in it, the whole model's config (config is the
  // rank's share) and the whole adapter and moments (start, checkpoints, the final adapter).
  std::unique_ptr<dist::Communicator> tp_group, dp_group;
  TensorParallel tp;
  ModelConfig full_config;
  std::unique_ptr<LoraAdapter> whole;
  std::vector<std::vector<float>> whole_m, whole_v;  // per factor of `whole`, A then B of each module
  int64_t start_step = 0, total_steps = 0, last_saved = -1;
  double elapsed_before = 0;  // seconds of earlier runs of a resumed training
  bool stopped = false;
  int64_t peak_activation_bytes = 0;
  nlohmann::json summary;
  std::string resumed_from;
};

Trainer::Trainer(std::unique_ptr<State> s) : s_(std::move(s)) {}
Trainer::~Trainer() = default;
bool Trainer::stopped() const { return s_->stopped; }
int64_t Trainer::start_step() const { return s_->start_step; }
int64_t Trainer::total_steps() const { return s_->total_steps; }
const nlohmann::json& Trainer::summary() const { return s_->summary; }

namespace {

// The recipe keys that change what a step computes: a checkpoint may only be resumed under the
// same ones (out, checkpointing and logging may differ).
nlohmann::json Fingerprint(const TrainRecipe& r) {
  nlohmann::json j = r.ToJson();
  j.erase("out");
  j.erase("checkpoint");
  j.erase("log");
  j.erase("memory");  // remat changes memory, not results
  // The default template: absent, as in checkpoints written before the key existed (a changed
  // template changes the tokens, which DatasetIdentity catches).
  if (j["data"].value("chat_template", std::string()).empty()) j["data"].erase("chat_template");
  // f32: absent, as in checkpoints written before the key existed (they trained in f32).
  if (j["train"].value("precision", std::string()) == "f32") j.erase("train");
  return j;
}

// The fingerprint keys whose values differ ("train.precision (\"f32\" in the checkpoint, \"bf16\"
// now)"), so that a refused resume says what to change.
std::string FingerprintDifferences(const nlohmann::json& saved, const nlohmann::json& now) {
  // Leaves by dotted key; the train.precision Fingerprint leaves out is the f32 it means.
  auto leaves = [](const nlohmann::json& j) {
    std::map<std::string, nlohmann::json> out = {{"train.precision", "f32"}};
    if (!j.is_object()) return out;
    for (const auto& [k, v] : j.items()) {
      if (!v.is_object()) {
        out[k] = v;
        continue;
      }
      for (const auto& [k2, v2] : v.items()) out[k + "." + k2] = v2;
    }
    return out;
  };
  const auto a = leaves(saved), b = leaves(now);
  std::set<std::string> names;
  for (const auto* side : {&a, &b}) {
    for (const auto& [k, v] : *side) names.insert(k);
  }
  std::string out;
  for (const std::string& k : names) {
    const auto ia = a.find(k), ib = b.find(k);
    const std::string va = ia == a.end() ? "unset" : ia->second.dump(), vb = ib == b.end() ? "unset" : ib->second.dump();
    if (va != vb) out += StrCat(out.empty() ? "" : ", ", k, " (", va, " in the checkpoint, ", vb, " now)");
  }
  return out;
}

// What a resumed run must train on: the same rows (a JSONL edited between a kill and --resume
// is re-tokenized into different rows under the same path).
nlohmann::json DatasetIdentity(const TokenDataset& d) {
  return {{"rows", d.rows()}, {"tokens", d.total_tokens()}, {"loss_tokens", d.total_loss_tokens()}};
}

std::string MetricsPath(const TrainRecipe& r) { return r.out + "/metrics.jsonl"; }

// Keeps the metrics lines of steps <= step (those after it belong to progress a kill lost).
Status TruncateMetrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return Status::Ok();
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto j = ParseJson(line, path);  // a torn last line is dropped
    if (j.ok() && j->is_object() && j->contains("step") && (*j)["step"].is_number_integer() &&
        (*j)["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  return WriteFileAtomic(path, kept);
}

Status AppendLine(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(StrCat(path, ": cannot open for appending"));
  const std::string text = line + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status::Ok() : Status::Error(StrCat(path, ": write failed"));
}

int64_t Targets(const TokenRow& r) {
  int64_t n = 0;
  for (size_t i = 1; i < r.loss_mask.size(); ++i) n += r.loss_mask[i] ? 1 : 0;
  return n;
}

LoraOptions AdapterOptions(const TrainRecipe& recipe) {
  LoraOptions lo;
  lo.rank = recipe.rank;
  lo.alpha = recipe.alpha;
  lo.use_rslora = recipe.use_rslora;
  lo.dropout = recipe.dropout;
  lo.target_regex = recipe.target_modules;
  return lo;
}

// The recipe's adapter: PEFT's initialisation, or lora.init_adapter's factors.
Result<std::unique_ptr<LoraAdapter>> MakeAdapter(const TrainRecipe& recipe, const ModelConfig& config,
                                                 const std::string& prefix) {
  GK_ASSIGN_OR_RETURN(LoraAdapter adapter, LoraAdapter::Create(config, prefix, AdapterOptions(recipe)));
  auto a = std::make_unique<LoraAdapter>(std::move(adapter));
  a->InitPeft(recipe.seed);
  if (recipe.init_adapter.empty()) return a;
  GK_ASSIGN_OR_RETURN(LoraAdapter init, LoraAdapter::LoadPeft(recipe.init_adapter, config, prefix));
  if (init.rank() != recipe.rank || init.scaling() != a->scaling() || init.modules().size() != a->modules().size()) {
    return Status::Error(StrCat("lora.init_adapter ", recipe.init_adapter, ": rank ", init.rank(), ", scaling ",
                                init.scaling(), " and ", init.modules().size(), " modules; the recipe wants rank ",
                                recipe.rank, ", scaling ", a->scaling(), " and ", a->modules().size(), " modules"));
  }
  for (LoraModule& m : a->modules()) {
    const LoraModule* src = init.Find(m.layer, m.target);
    if (!src) return Status::Error(StrCat("lora.init_adapter ", recipe.init_adapter, ": has no factors for ", m.name));
    m.a = src->a;
    m.b = src->b;
  }
  return a;
}

// A full fine-tune needs weights, f32 masters, gradients and moments of every parameter at
// once: refused before the model is loaded when the estimate (model/train/training_memory.h;
// `gemmakit plan --train --full --hardware cpu` lists the same items) exceeds the memory
// available, or memory.max_bytes.
Status CheckFullFineTuneFits(const TrainRecipe& recipe, const ModelConfig& config, int64_t tokens) {
  const int weight_bytes = config.torch_dtype == "float32" ? 4 : 2;
  const FullFineTuneMemory m = EstimateFullFineTune(config, weight_bytes, tokens, recipe.remat);
  const uint64_t available = AvailableMemoryBytes();
  double budget = double(available);
  std::string source = "available now";
  if (recipe.max_bytes > 0 && (budget == 0 || double(recipe.max_bytes) < budget)) {
    budget = double(recipe.max_bytes);
    source = "allowed by memory.max_bytes";
  }
  if (budget == 0 || m.total <= budget) return Status::Ok();
  std::string parts;
  for (const MemoryItem& i : m.items) parts += StrCat(parts.empty() ? "" : ", ", i.what, " ", HumanBytes(i.bytes));
  return Status::Error(StrCat("lora.full_finetune: fully fine-tuning ", double(std::llround(double(m.params) / 1e4)) / 100.0,
                              " M parameters needs ", HumanBytes(m.total), " (", parts, "), more than the ",
                              HumanBytes(budget), " ", source,
                              "; train a LoRA adapter instead, or use a machine with more memory"));
}

// A tensor as checkpoints hold it, with its AdamW moments: a trainable, or under tensor
// parallelism a factor of the whole adapter.
struct CheckpointSlot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* value = nullptr;
  std::vector<float>* m = nullptr;
  std::vector<float>* v = nullptr;
};

std::vector<CheckpointSlot> CheckpointSlots(Trainer::State& s) {
  std::vector<CheckpointSlot> out;
  if (s.tp.active()) {
    size_t i = 0;
    for (LoraModule& m : s.whole->modules()) {
      out.push_back({LoraAdapter::KeyA(m), {s.whole->rank(), m.in}, &m.a, &s.whole_m[i], &s.whole_v[i]});
      ++i;
      out.push_back({LoraAdapter::KeyB(m), {m.out, s.whole->rank()}, &m.b, &s.whole_m[i], &s.whole_v[i]});
      ++i;
    }
    return out;
  }
  for (size_t i = 0; i < s.trainables.size(); ++i) {
    Trainable& t = s.trainables[i];
    out.push_back({t.name, t.shape, t.value, &s.optimizer->m()[i], &s.optimizer->v()[i]});
  }
  return out;
}

// Moments laid out as an adapter of `shape`'s modules (module i's A and B moments as its a
// and b), so that the adapter's slice and gather carry them too.
LoraAdapter MomentsAsAdapter(const LoraAdapter& shape, const std::vector<std::vector<float>>& moments) {
  LoraAdapter a = shape;
  for (size_t i = 0; i < a.modules().size(); ++i) {
    LoraModule& m = a.modules()[i];
    m.a = moments[2 * i];
    m.b = moments[2 * i + 1];
    m.grad_a.clear();
    m.grad_b.clear();
  }
  return a;
}

// Tensor parallelism: every rank takes its share of the whole adapter and moments.
Status ScatterWhole(Trainer::State& s) {
  GK_RETURN_IF_ERROR(SliceLoraAdapter(*s.whole, s.full_config, s.tp, s.adapter.get()));
  for (auto [whole, share] : {std::pair{&s.whole_m, &s.optimizer->m()}, std::pair{&s.whole_v, &s.optimizer->v()}}) {
    LoraAdapter part = MomentsAsAdapter(*s.adapter, *share);
    GK_RETURN_IF_ERROR(SliceLoraAdapter(MomentsAsAdapter(*s.whole, *whole), s.full_config, s.tp, &part));
    for (size_t i = 0; i < part.modules().size(); ++i) {
      (*share)[2 * i] = part.modules()[i].a;
      (*share)[2 * i + 1] = part.modules()[i].b;
    }
  }
  return Status::Ok();
}

// Tensor parallelism, collective over the group: the whole adapter and moments from the shares.
Status GatherWhole(Trainer::State& s) {
  GK_RETURN_IF_ERROR(GatherLoraAdapter(*s.adapter, s.full_config, s.tp, s.whole.get()));
  for (auto [whole, share] : {std::pair{&s.whole_m, &s.optimizer->m()}, std::pair{&s.whole_v, &s.optimizer->v()}}) {
    LoraAdapter all = MomentsAsAdapter(*s.whole, *whole);
    GK_RETURN_IF_ERROR(GatherLoraAdapter(MomentsAsAdapter(*s.adapter, *share), s.full_config, s.tp, &all));
    for (size_t i = 0; i < all.modules().size(); ++i) {
      (*whole)[2 * i] = all.modules()[i].a;
      (*whole)[2 * i + 1] = all.modules()[i].b;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainRecipe& recipe, const std::string& dataset_dir,
                                                 ThreadPool* pool, bool resume, dist::Communicator* comm, int tp,
                                                 const DeviceSpec& device) {
  auto s = std::make_unique<State>();
  s->device = device;
  if (device.kind == DeviceKind::kCuda) {
    if ((comm && comm->size() > 1) || tp > 1) {
      return Status::Error(StrCat("--device ", device.ToString(), " trains on one GPU; data and tensor parallelism "
                                  "(mpirun, --tp) run on CPUs"));
    }
    if (recipe.full_finetune) {
      return Status::Error(StrCat("--device ", device.ToString(), " trains LoRA adapters; full fine-tuning runs on the CPU"));
    }
    GK_RETURN_IF_ERROR(CheckDeviceAvailable(device));
  }
  if (!comm) {
    s->own_comm = dist::SingleProcessCommunicator();
    comm = s->own_comm.get();
  }
  s->world = s->comm = comm;
  if (tp < 1) return Status::Error(StrCat("--tp must be at least 1, got ", tp));
  if (comm->size() % tp != 0) {
    return Status::Error(StrCat("--tp ", tp, " needs a multiple of ", tp, " ranks (mpirun -np ", tp,
                                " x the data-parallel groups); this run has ", comm->size()));
  }
  if (tp > 1) {  // consecutive ranks form a tensor-parallel group; equal positions a data-parallel one
    GK_ASSIGN_OR_RETURN(s->tp_group, comm->Split(comm->rank() / tp, comm->rank()));
    GK_ASSIGN_OR_RETURN(s->dp_group, comm->Split(comm->rank() % tp, comm->rank()));
    s->tp = TensorParallel{s->tp_group.get(), s->tp_group->rank(), tp};
    s->comm = s->dp_group.get();
  }
  // A failed CreateLocal frees the state, the single-process communicator with it.
  if (comm->size() == 1) return CreateLocal(recipe, dataset_dir, pool, resume, std::move(s));
  Result<std::unique_ptr<Trainer>> local = CreateLocal(recipe, dataset_dir, pool, resume, std::move(s));
  // Agree before the first collective of the run: a rank that failed alone would leave the
  // others waiting in it.
  int64_t failed = local.ok() ? 0 : 1;
  GK_RETURN_IF_ERROR(comm->AllReduceMax(std::span<int64_t>(&failed, 1)));
  if (!local.ok()) return local;
  if (failed) return Status::Error("another rank could not start the run (its message is above)");
  GK_RETURN_IF_ERROR((*local)->SyncFromRankZero());
  return local;
}

// The other ranks take rank 0's step, parameters and moments: one starting point, whether rank 0
// resumed a checkpoint (which the others need not see: only rank 0 needs the run directory) or
// initialised the adapter.
Status Trainer::SyncFromRankZero() {
  State& s = *s_;
  int64_t counters[3] = {s.start_step, s.optimizer->step(), s.last_saved};
  GK_RETURN_IF_ERROR(s.world->Broadcast(std::as_writable_bytes(std::span<int64_t>(counters)), 0));
  GK_RETURN_IF_ERROR(s.world->Broadcast(std::as_writable_bytes(std::span<double>(&s.elapsed_before, 1)), 0));
  s.start_step = counters[0];
  s.optimizer->set_step(counters[1]);
  s.last_saved = counters[2];
  // Rank 0's values and moments in the layout checkpoints hold (the whole adapter's under
  // tensor parallelism, then each rank takes its share).
  for (const CheckpointSlot& c : CheckpointSlots(s)) {
    for (std::vector<float>* v : {c.value, c.m, c.v}) {
      GK_RETURN_IF_ERROR(s.world->Broadcast(std::as_writable_bytes(std::span<float>(*v)), 0));
    }
  }
  if (s.tp.active()) GK_RETURN_IF_ERROR(ScatterWhole(s));
  if (FullParams* fp = s.model->full_params()) fp->Sync(*s.pool);
  return BroadcastString(*s.world, &s.resumed_from, 0);
}

Result<std::unique_ptr<Trainer>> Trainer::CreateLocal(const TrainRecipe& recipe, const std::string& dataset_dir,
                                                      ThreadPool* pool, bool resume, std::unique_ptr<State> s) {
  GK_RETURN_IF_ERROR(ValidateRecipe(recipe));
  s->recipe = recipe;
  s->pool = pool;
  const bool writer = s->world->rank() == 0;
  s->dataset_dir = dataset_dir;
  GK_ASSIGN_OR_RETURN(s->dataset, TokenDataset::Open(dataset_dir));
  // rows < micro_batch × grad_accum, tested without forming the product (both are >= 1, but
  // their product can overflow int64: --set batch.micro_batch=4611686018427387904).
  if (recipe.micro_batch > s->dataset.rows() / recipe.grad_accum) {
    return Status::Error(StrCat(dataset_dir, ": ", s->dataset.rows(), " rows, fewer than one step's ",
                                recipe.micro_batch, " × ", recipe.grad_accum, " (micro_batch × grad_accum)"));
  }
  const int64_t per_step = recipe.micro_batch * recipe.grad_accum;
  GK_ASSIGN_OR_RETURN(s->config, LoadModelConfig(recipe.model));
  s->full_config = s->config;
  if (s->tp.active()) {
    if (recipe.full_finetune) {
      return Status::Error("--tp: tensor-parallel training trains LoRA adapters; lora.full_finetune is not supported "
                           "with --tp yet (use data parallelism alone)");
    }
    GK_ASSIGN_OR_RETURN(s->config, ShardModelConfig(s->full_config, s->tp.size));
  }
  int64_t longest = 0;
  for (int64_t i = 0; i < s->dataset.rows(); ++i) longest = std::max(longest, s->dataset.RowLength(i));
  TrainingModelOptions to;
  to.remat = recipe.remat;
  to.precision = recipe.precision == "f32" ? TrainPrecision::kF32 : TrainPrecision::kBf16;
  to.tp = s->tp;
  to.max_tokens = std::max<int64_t>(2, longest * recipe.micro_batch);
  if (recipe.full_finetune) {
    GK_RETURN_IF_ERROR(CheckFullFineTuneFits(recipe, s->config, to.max_tokens));
    // The weights are updated in place: they must live in memory the trainer owns.
    GK_ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(recipe.model, s->config, WeightLoadMode::kCopy));
    to.full_finetune_from = recipe.model;
    GK_ASSIGN_OR_RETURN(s->model, TrainingModel::Create(s->config, std::move(weights), nullptr, pool, to));
    for (FullParam& p : s->model->full_params()->params()) s->trainables.push_back({p.name, p.shape, &p.value, &p.grad});
  } else {
    // A rank of a tensor-parallel group reads its share into memory of its own (model/weights.h).
    GK_ASSIGN_OR_RETURN(ModelWeights weights, LoadWeights(recipe.model, s->full_config, WeightLoadMode::kMmap, s->tp));
    GK_ASSIGN_OR_RETURN(s->adapter, MakeAdapter(recipe, s->full_config, weights.prefix));
    if (s->tp.active()) {  // the whole adapter is kept for checkpoints; the rank trains its share
      s->whole = std::move(s->adapter);
      GK_ASSIGN_OR_RETURN(LoraAdapter share, LoraAdapter::Create(s->config, weights.prefix, AdapterOptions(recipe)));
      s->adapter = std::make_unique<LoraAdapter>(std::move(share));
      GK_RETURN_IF_ERROR(SliceLoraAdapter(*s->whole, s->full_config, s->tp, s->adapter.get()));
      for (const LoraModule& m : s->whole->modules()) {
        for (const std::vector<float>* f : {&m.a, &m.b}) {
          s->whole_m.emplace_back(f->size(), 0.f);
          s->whole_v.emplace_back(f->size(), 0.f);
        }
      }
    }
    if (s->device.kind == DeviceKind::kCuda) {
#ifdef GK_HAVE_CUDA
      CudaTrainingOptions go;
      go.device = s->device.index;
      go.max_tokens = to.max_tokens;
      go.precision = to.precision;
      GK_ASSIGN_OR_RETURN(s->model, CudaTrainingModel::Create(s->config, weights, s->adapter.get(), go));
#else
      return Status::Error(StrCat("--device ", s->device.ToString(), ": this gemmakit was built without the CUDA backend"));
#endif
    } else {
      GK_ASSIGN_OR_RETURN(s->model, TrainingModel::Create(s->config, std::move(weights), s->adapter.get(), pool, to));
    }
    for (LoraModule& m : s->adapter->modules()) {
      s->trainables.push_back({LoraAdapter::KeyA(m), {s->adapter->rank(), m.in}, &m.a, &m.grad_a});
      s->trainables.push_back({LoraAdapter::KeyB(m), {m.out, s->adapter->rank()}, &m.b, &m.grad_b});
    }
  }
  std::vector<int64_t> sizes;
  for (const Trainable& t : s->trainables) sizes.push_back(int64_t(t.value->size()));
  AdamWOptions ao;
  ao.beta1 = recipe.beta1;
  ao.beta2 = recipe.beta2;
  ao.eps = recipe.eps;
  ao.weight_decay = recipe.weight_decay;
  s->optimizer = std::make_unique<AdamW>(ao, sizes);
  s->order = std::make_unique<DataOrder>(s->dataset.rows(), per_step, recipe.seed, recipe.shuffle);
  if (recipe.max_steps <= 0 && recipe.epochs > std::numeric_limits<int64_t>::max() / s->order->steps_per_epoch()) {
    return Status::Error(StrCat("batch.epochs ", recipe.epochs, " × ", s->order->steps_per_epoch(),
                                " steps an epoch overflows the step count; set batch.max_steps"));
  }
  s->total_steps = recipe.max_steps > 0 ? recipe.max_steps : recipe.epochs * s->order->steps_per_epoch();
  s->schedule = WarmupCosineDecay{0.0, recipe.learning_rate, recipe.warmup_steps, s->total_steps,
                                  recipe.end_learning_rate, 1.0};

  std::error_code ec;
  std::filesystem::create_directories(recipe.out, ec);
  if (ec) return Status::Error(StrCat(recipe.out, ": cannot create the run directory: ", ec.message()));
  GK_ASSIGN_OR_RETURN(std::optional<std::string> latest, FindLatestCheckpoint(recipe.out));
  if (latest && !resume) {
    return Status::Error(StrCat(recipe.out, " already has checkpoints (newest ", *latest,
                                "); pass --resume to continue it, or choose another out"));
  }
  if (latest) {
    GK_ASSIGN_OR_RETURN(CheckpointContents ck, LoadCheckpoint(*latest));
    const nlohmann::json& st = ck.trainer_state;
    if (st.value("fingerprint", nlohmann::json()) != Fingerprint(recipe)) {
      return Status::Error(StrCat(*latest, ": was trained with a different recipe (",
                                  FingerprintDifferences(st.value("fingerprint", nlohmann::json()), Fingerprint(recipe)),
                                  "); resume with the same recipe"));
    }
    if (st.contains("dataset") && st["dataset"] != DatasetIdentity(s->dataset)) {
      return Status::Error(StrCat(*latest, ": was trained on other data (", st["dataset"].dump(), ", now ",
                                  DatasetIdentity(s->dataset).dump(), "); resume with the same data"));
    }
    const int64_t world = st.value("world_size", int64_t(1)), tp = st.value("tensor_parallel", int64_t(1));
    if (world != s->world->size()) {
      return Status::Error(StrCat(*latest, ": was trained by ", world, " process", world == 1 ? "" : "es",
                                  ", this run has ", s->world->size(), "; resume it with the same number (mpirun -np ",
                                  world, ")"));
    }
    if (tp != s->tp.size) {
      return Status::Error(StrCat(*latest, ": was trained with --tp ", tp, ", this run has --tp ", s->tp.size,
                                  "; resume it with the same tensor parallelism"));
    }
    if (ck.full != recipe.full_finetune) {
      return Status::Error(StrCat(*latest, ": is a ", ck.full ? "full fine-tuning" : "LoRA",
                                  " checkpoint; resume it with the recipe it was trained with"));
    }
    std::map<std::string, const NamedTensor*> by_name;
    for (const NamedTensor& t : ck.params) by_name[t.name] = &t;
    for (const NamedTensor& t : ck.optimizer) by_name[t.name] = &t;
    for (const CheckpointSlot& c : CheckpointSlots(*s)) {
      for (const auto& [name, dst] : {std::pair{c.name, c.value}, std::pair{c.name + ".exp_avg", c.m},
                                      std::pair{c.name + ".exp_avg_sq", c.v}}) {
        auto it = by_name.find(name);
        if (it == by_name.end() || it->second->data.size() != dst->size()) {
          return Status::Error(StrCat(*latest, ": tensor ", name, " is missing or has the wrong size"));
        }
        *dst = it->second->data;
      }
    }
    if (FullParams* fp = s->model->full_params()) fp->Sync(*pool);  // the model computes with the restored masters
    GK_RETURN_IF_ERROR(s->model->FactorsChanged());  // a GPU's copy of the restored factors
    s->start_step = st.value("step", int64_t(0));
    s->optimizer->set_step(st.value("optimizer_step", s->start_step));
    s->elapsed_before = st.value("elapsed_s", 0.0);
    s->last_saved = s->start_step;
    s->resumed_from = *latest;
    if (writer) GK_RETURN_IF_ERROR(TruncateMetrics(MetricsPath(recipe), s->start_step));
  } else if (writer) {
    std::filesystem::remove(MetricsPath(recipe), ec);
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(s)));
}

namespace {

Status SaveState(Trainer::State& s, int64_t step, double elapsed) {
  CheckpointContents c;
  c.full = s.recipe.full_finetune;
  if (!c.full) c.adapter_config = (s.tp.active() ? s.whole : s.adapter)->PeftConfigJson(s.recipe.model);
  // Written from where the values live (no copy of a fully fine-tuned model).
  for (const CheckpointSlot& t : CheckpointSlots(s)) {
    c.params.push_back({t.name, t.shape, {}, t.value->data()});
    c.optimizer.push_back({t.name + ".exp_avg", t.shape, {}, t.m->data()});
    c.optimizer.push_back({t.name + ".exp_avg_sq", t.shape, {}, t.v->data()});
  }
  c.trainer_state = {{"step", step},
                     {"optimizer_step", s.optimizer->step()},
                     {"total_steps", s.total_steps},
                     {"epoch", s.order->EpochOf(std::max<int64_t>(0, step))},
                     {"data_position", {{"epoch", step / s.order->steps_per_epoch()},
                                        {"step_in_epoch", step % s.order->steps_per_epoch()},
                                        {"rows_per_step", s.recipe.micro_batch * s.recipe.grad_accum}}},
                     {"rng", {{"seed", s.recipe.seed}, {"dropout", "counter-based: MixKey(seed, micro-batch index)"}}},
                     {"elapsed_s", elapsed},
                     {"world_size", s.world->size()},
                     {"tensor_parallel", s.tp.size},
                     {"fingerprint", Fingerprint(s.recipe)},
                     {"dataset", DatasetIdentity(s.dataset)}};
  GK_RETURN_IF_ERROR(SaveCheckpoint(s.recipe.out, c, s.recipe.keep_last));
  s.last_saved = step;
  return Status::Ok();
}

// Every rank at a checkpoint: under tensor parallelism the group first puts the whole adapter
// and moments together; rank 0 writes.
Status Save(Trainer::State& s, int64_t step, double elapsed, bool writer) {
  if (s.tp.active()) GK_RETURN_IF_ERROR(GatherWhole(s));
  if (writer) return SaveState(s, step, elapsed);
  s.last_saved = step;
  return Status::Ok();
}

// Data parallel: the ranks' gradients (each the sum over its micro-batches) and loss counts
// summed over all ranks, in one all-reduce each.
Status AllReduceStep(dist::Communicator& comm, std::vector<Trainable>& trainables, std::vector<float>* flat,
                     MicroBatchStats* stats) {
  std::vector<std::span<float>> grads;
  for (Trainable& t : trainables) grads.emplace_back(*t.grad);
  GK_RETURN_IF_ERROR(dist::AllReduceSumAll(comm, grads, flat));
  double counts[4] = {stats->loss_sum, double(stats->targets), double(stats->correct), double(stats->tokens)};
  GK_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(counts)));
  stats->loss_sum = counts[0];
  stats->targets = int64_t(counts[1]);
  stats->correct = int64_t(counts[2]);
  stats->tokens = int64_t(counts[3]);
  return Status::Ok();
}

}  // namespace

Status Trainer::Run(const std::atomic<bool>* stop, const std::function<void(const StepLog&)>& on_step) {
  State& s = *s_;
  const TrainRecipe& r = s.recipe;
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  auto elapsed = [&] { return s.elapsed_before + std::chrono::duration<double>(Clock::now() - t_start).count(); };
  // Micro-batches are dealt over the data-parallel group (every rank of a tensor-parallel group
  // runs the same ones).
  dist::Communicator& comm = *s.comm;
  const int world = comm.size(), me = comm.rank();
  const bool writer = s.world->rank() == 0;
  // A stop every rank agrees on (one flag all-reduced): the ranks leave at the same micro-batch.
  Status comm_error = Status::Ok();
  auto stop_requested = [&] {
    int64_t flag = stop && stop->load(std::memory_order_relaxed) ? 1 : 0;
    if (s.world->size() > 1 && comm_error.ok()) {
      comm_error = s.world->AllReduceMax(std::span<int64_t>(&flag, 1));
      if (!comm_error.ok()) return true;
    }
    return flag != 0;
  };
  std::vector<float> flat_grads;  // data parallel: every gradient in one all-reduce
  int64_t run_tokens = 0, run_targets = 0, steps_done = 0;
  double last_loss = 0;
  const int32_t pad = int32_t(s.config.pad_token_id);

  int64_t step = s.start_step;
  for (; step < s.total_steps; ++step) {
    if (stop_requested()) break;
    const auto t0 = Clock::now();
    const std::vector<int64_t> ids = s.order->StepRows(step);
    std::vector<TokenRow> rows;
    int64_t targets = 0;
    for (int64_t id : ids) {
      rows.push_back(s.dataset.Row(id));
      targets += Targets(rows.back());
    }
    for (Trainable& t : s.trainables) std::fill(t.grad->begin(), t.grad->end(), 0.f);
    const float loss_scale = 1.f / float(std::max<int64_t>(1, targets));
    MicroBatchStats stats;
    bool abandoned = false;
    // Round k: micro-batch k·world + rank on each rank (a rank past grad_accum only votes).
    for (int64_t round = 0; round * world < r.grad_accum; ++round) {
      if (stop_requested()) {
        abandoned = true;
        break;
      }
      const int64_t j = round * world + me;
      if (j >= r.grad_accum) continue;
      std::vector<TokenRow> micro(rows.begin() + j * r.micro_batch, rows.begin() + (j + 1) * r.micro_batch);
      if (r.batching == "padded") {  // pad to the longest row: the cost padding-free batching avoids
        size_t longest = 0;
        for (const TokenRow& x : micro) longest = std::max(longest, x.tokens.size());
        for (TokenRow& x : micro) {
          x.tokens.resize(longest, pad);
          x.loss_mask.resize(longest, 0);
        }
      }
      std::vector<TrainRowView> views;
      for (const TokenRow& x : micro) views.push_back({x.tokens, x.loss_mask});
      const uint64_t key = MixKey(r.seed, uint64_t(step * r.grad_accum + j));
      GK_RETURN_IF_ERROR(s.model->ForwardBackward(views, loss_scale, key, &stats));
      s.peak_activation_bytes = std::max(s.peak_activation_bytes, s.model->activation_bytes());
    }
    GK_RETURN_IF_ERROR(comm_error);
    if (abandoned) break;
    GK_RETURN_IF_ERROR(s.model->GradientsToHost());  // a GPU's accumulated gradients, for the optimizer
    // Tensor parallel: the factors the group shares get every rank's part of their gradient.
    if (s.tp.active()) GK_RETURN_IF_ERROR(ReduceLoraGradsOverTp(*s.adapter, s.full_config, s.tp));
    if (world > 1) GK_RETURN_IF_ERROR(AllReduceStep(comm, s.trainables, &flat_grads, &stats));

    std::vector<std::span<float>> grads;
    std::vector<ParamRef> params;
    for (Trainable& t : s.trainables) {
      grads.emplace_back(*t.grad);
      params.push_back({t.value->data(), t.grad->data(), int64_t(t.value->size())});
    }
    std::vector<std::span<const float>> cgrads(grads.begin(), grads.end());
    double norm = 0;
    if (s.tp.active()) {  // over the whole adapter, each shared factor counted once
      GK_ASSIGN_OR_RETURN(const double squares, LoraGradSquaredNorm(*s.adapter, s.full_config, s.tp));
      norm = std::sqrt(squares);
    } else {
      norm = GlobalGradNorm(cgrads);
    }
    if (r.max_grad_norm > 0) ClipByGlobalNorm(grads, norm, r.max_grad_norm);
    const double lr = s.schedule(step);
    s.optimizer->Step(params, lr);
    if (FullParams* fp = s.model->full_params()) fp->Sync(*s.pool);  // the next step computes with the new masters
    GK_RETURN_IF_ERROR(s.model->FactorsChanged());                     // ... and a GPU with the new factors

    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    StepLog log;
    log.step = step + 1;
    log.total_steps = s.total_steps;
    log.epoch = s.order->EpochOf(step);
    log.loss = stats.loss_sum / double(std::max<int64_t>(1, stats.targets));
    log.learning_rate = lr;
    log.grad_norm = norm;
    log.accuracy = double(stats.correct) / double(std::max<int64_t>(1, stats.targets));
    log.tokens = stats.tokens;
    log.target_tokens = stats.targets;
    log.tokens_per_s = double(stats.tokens) / std::max(dt, 1e-9);
    log.elapsed_s = elapsed();
    last_loss = log.loss;
    run_tokens += stats.tokens;
    run_targets += stats.targets;
    ++steps_done;
    if (writer) {
      GK_RETURN_IF_ERROR(AppendLine(MetricsPath(r), log.ToJson().dump()));
      if (on_step) on_step(log);
    }
    if (r.save_every > 0 && (step + 1) % r.save_every == 0) GK_RETURN_IF_ERROR(Save(s, step + 1, elapsed(), writer));
  }
  GK_RETURN_IF_ERROR(comm_error);
  s.stopped = step < s.total_steps;
  if (s.last_saved != step) GK_RETURN_IF_ERROR(Save(s, step, elapsed(), writer));  // the whole adapter too
  if (!writer) {
    s.summary = {{"rank", s.world->rank()}, {"steps", {{"done", step}, {"start", s.start_step}}}};
    return Status::Ok();
  }
  if (!s.stopped) {
    if (FullParams* fp = s.model->full_params()) GK_RETURN_IF_ERROR(fp->WriteCheckpoint(r.model, r.out + "/model"));
    else GK_RETURN_IF_ERROR((s.tp.active() ? s.whole : s.adapter)->SavePeft(r.out + "/adapter", r.model));
  }

  const double wall = std::chrono::duration<double>(Clock::now() - t_start).count();
  int64_t total_params = s.full_config.ParameterCount();
  const FullParams* full = s.model->full_params();
  const int64_t trainable = full ? full->ParameterCount() : (s.tp.active() ? s.whole : s.adapter)->ParameterCount();
  s.summary = {
      {"config", r.ToJson()},
      {"dataset", {{"dir", s.dataset_dir},
                   {"rows", s.dataset.rows()},
                   {"tokens", s.dataset.total_tokens()},
                   {"loss_tokens", s.dataset.total_loss_tokens()},
                   {"meta", s.dataset.meta()}}},
      {"model", {{"dir", r.model}, {"architecture", s.full_config.arch == Arch::kGemma4 ? "gemma4" : "gemma3"},
                 {"layers", s.full_config.num_layers}, {"hidden_size", s.full_config.hidden_size}}},
      {"parameters", {{"total", total_params},
                      {"trainable", trainable},
                      {"trainable_fraction", double(trainable) / double(std::max<int64_t>(1, total_params))},
                      {"full_finetune", full != nullptr},
                      {"lora_modules", full ? 0 : s.adapter->modules().size()}}},
      {"precision", s.model->precision() == TrainPrecision::kBf16 ? "bf16" : "f32"},
      {"parallel", {{"ranks", s.world->size()}, {"tensor_parallel", s.tp.size}, {"data_parallel", s.comm->size()}}},
      {"hardware", {{"cpu", CpuModelName()},
                    {"threads", s.pool->size()},
                    {"hardware_threads", HardwareThreads()},
                    {"memory_bytes", TotalMemoryBytes()},
                    {"accelerator", s.device.kind == DeviceKind::kCuda ? nlohmann::json(s.device.ToString())
                                                                        : nlohmann::json(nullptr)}}},
      {"steps", {{"total", s.total_steps}, {"start", s.start_step}, {"done", step},
                 {"steps_per_epoch", s.order->steps_per_epoch()}}},
      {"stopped_early", s.stopped},
      {"resumed_from", s.resumed_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.resumed_from)},
      {"wall_time_s", wall},
      {"elapsed_s_all_runs", elapsed()},
      {"tokens", run_tokens},
      {"target_tokens", run_targets},
      {"tokens_per_s", double(run_tokens) / std::max(wall, 1e-9)},
      {"steps_per_s", double(steps_done) / std::max(wall, 1e-9)},
      {"final_loss", steps_done > 0 ? nlohmann::json(last_loss) : nlohmann::json(nullptr)},
      {"memory", {{"remat", r.remat || s.device.kind == DeviceKind::kCuda},  // the GPU trainer always remats
                  {"activation_bytes", s.peak_activation_bytes},
                  {"peak_rss_bytes", PeakRssBytes()},
                  {"device_peak_bytes", s.model->peak_device_bytes() > 0 ? nlohmann::json(s.model->peak_device_bytes())
                                                                          : nlohmann::json(nullptr)}}},
      {"adapter", s.stopped || full ? nlohmann::json(nullptr) : nlohmann::json(r.out + "/adapter")},
      {"trained_model", s.stopped || !full ? nlohmann::json(nullptr) : nlohmann::json(r.out + "/model")},
  };
  return WriteFileAtomic(r.out + "/training_run.json", s.summary.dump(2) + "\n");
}

}  // namespace gk::train
