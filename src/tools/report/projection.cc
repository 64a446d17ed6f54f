#include "tools/report/projection.h"

#include <cmath>

#include "model/presets.h"
#include "tools/plan/roofline.h"
#include "tools/report/format.h"

namespace gk::report {
namespace {

constexpr const char* kNoMachine = "no hardware given";

// run.json's model (a preset name or a directory), else the training run's model directory.
Result<ModelConfig> ModelOf(const Run& r) {
  const std::string m = !r.spec.model.empty() ? r.spec.model : r.training ? r.training->model_dir : "";
  if (m.empty()) return Status::Error("model not known");
  if (auto preset = PresetConfig(m); preset.ok()) return preset;
  auto c = LoadModelConfig(m);
  if (!c.ok()) return Status::Error(StrCat("no config.json at ", m));
  return c;
}

Result<plan::Mesh> MeshOf(const Run& r) {
  if (!r.spec.mesh.empty()) return plan::ParseMesh(r.spec.mesh);
  plan::Mesh m;
  m.fsdp = r.spec.machine ? r.spec.machine->chips : 1;
  return m;
}

std::string MeasuredOver(double measured, double projected) {
  return projected > 0 && std::isfinite(measured) ? Fixed(measured / projected, 3) : "-";
}

}  // namespace

Table ProjectionTable(const std::vector<Run>& runs, const ReportOptions& options) {
  Table t;
  t.title = "Roofline projection vs measured";
  t.header = RunHeader(runs);
  // Each run's model config, read once (config.json on disk for a directory).
  std::vector<Result<ModelConfig>> models;
  for (const Run& r : runs) models.push_back(ModelOf(r));
  std::vector<std::string> machine{"machine"}, mesh{"mesh (training: fsdp × tp; serving: tp = chips)"};
  std::vector<std::string> train_proj{"projected training tok/s (lower-bound step)"}, train_meas{"measured training tok/s"},
      train_ratio{"measured / projected (training)"};
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    if (!r.spec.machine) {
      for (auto* row : {&machine, &mesh, &train_proj, &train_meas, &train_ratio}) row->push_back(kNoMachine);
      continue;
    }
    const cost::Machine& hw = *r.spec.machine;
    machine.push_back(StrCat(hw.name, " (", hw.chips, " × ", hw.chip.name, ")"));
    auto m = MeshOf(r);
    const Result<ModelConfig>& c = models[i];
    mesh.push_back(m.ok() ? m->Text() : m.message());
    if (!r.training || !r.training->max_seq_len || !c.ok() || !m.ok()) {
      const std::string why = !r.training ? "not measured" : !c.ok() ? c.message() : !m.ok() ? m.message() : "recipe shape not known";
      for (auto* row : {&train_proj, &train_meas, &train_ratio}) row->push_back(why);
      continue;
    }
    const TrainingArtifact& tr = *r.training;
    const plan::TrainProjection p = plan::ProjectTraining(*c, hw, *m, *tr.max_seq_len, int(tr.micro_batch.value_or(1)),
                                                         int(tr.lora_rank.value_or(0)), tr.remat);
    train_proj.push_back(Grouped(p.tokens_per_s, 1));
    train_meas.push_back(Grouped(tr.tokens_per_s, 1));
    train_ratio.push_back(MeasuredOver(tr.tokens_per_s, p.tokens_per_s));
  }
  for (auto* row : {&machine, &mesh, &train_proj, &train_meas, &train_ratio}) t.rows.push_back(*row);

  // Decode: the batch-1 bound at the workload's mean context against the median TPOT measured
  // at the compared rate (where batching makes the measured step slower than batch 1).
  for (const WorkloadKey& key : AllWorkloads(runs)) {
    const auto rate = LatencyRate(runs, key, options);
    std::vector<std::string> proj{StrCat(key.first, " in / ", key.second, " out: projected TPOT ms (batch 1)")},
        meas{StrCat("  measured median TPOT ms", rate ? StrCat(" at ", Rate(*rate)) : "")},
        ratio{"  measured / projected (TPOT)"};
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      const ServingWorkload* w = FindWorkload(r, key);
      const Result<ModelConfig>& c = models[i];
      const ServingPoint* pt = w && rate ? PointAt(*w, *rate) : nullptr;
      if (!r.spec.machine || !c.ok() || !pt) {
        const std::string why = !r.spec.machine ? kNoMachine : !c.ok() ? c.message() : "not measured";
        for (auto* row : {&proj, &meas, &ratio}) row->push_back(why);
        continue;
      }
      const plan::ServeProjection p = plan::ProjectServing(*c, *r.spec.machine, r.spec.machine->chips, key.first,
                                                           key.first + key.second / 2, 1, 2);
      proj.push_back(Fixed(p.tpot_s * 1e3, 3));
      meas.push_back(Fixed(pt->median_tpot_ms, 3));
      ratio.push_back(MeasuredOver(pt->median_tpot_ms, p.tpot_s * 1e3));
    }
    for (auto* row : {&proj, &meas, &ratio}) t.rows.push_back(*row);
  }
  t.note = "Projections are lower bounds (each of FLOPs, memory and interconnect at its peak, perfectly "
           "overlapped) from the model, the recipe's shape and the catalog machine; training counts LoRA on a "
           "frozen base; decode is one sequence with a bf16 KV cache at input + output/2 tokens. Measured "
           "throughput is usually a fraction of the bound, a measured TPOT a multiple of it.";
  return t;
}

}  // namespace gk::report
