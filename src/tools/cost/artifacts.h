// What `gemmakit cost` reads: a training_run.json (engines/train/trainer.cc) and the result
// JSONs `gemmakit bench serve --save-result` writes (vLLM's result layout, one per request
// rate, and gemmakit's sweep file with every point). Errors name the file and the field.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace gk::cost {

struct TrainingRunSummary {
  std::string path;
  double wall_s = 0;          // this run's wall-clock time (what was billed)
  double elapsed_all_s = 0;   // all runs of a resumed training
  double tokens = 0;          // tokens trained in this run
  double tokens_per_s = 0;
  bool resumed = false;
};
Result<TrainingRunSummary> ReadTrainingRun(const std::string& path);

// One benchmark point: a request rate of one (input, output) workload.
struct ServingPoint {
  std::string file;
  int input_len = 0, output_len = 0;  // per request (the bench's --random-*-len)
  std::string request_rate;           // "4", "inf"
  double output_throughput = 0;       // output tok/s of the whole server
  double median_ttft_ms = 0, median_tpot_ms = 0;
};
// A result file gives one point, a sweep file one per request rate.
Result<std::vector<ServingPoint>> ReadServingResult(const std::string& path);

// The workloads of some points: for each (input, output), the point of highest output
// throughput over the request-rate sweep (how the reference case costs serving).
struct ServingWorkload {
  int input_len = 0, output_len = 0;
  ServingPoint best;
  int points = 0;
  std::string Label() const;  // "512 in / 256 out"
};
std::vector<ServingWorkload> BestPerWorkload(const std::vector<ServingPoint>& points);

}  // namespace gk::cost
