#include "tools/cost/artifacts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/test_temp_dir.h"

namespace gk::cost {
namespace {

std::string Write(const std::string& dir, const std::string& name, const std::string& text) {
  std::filesystem::create_directories(dir);
  const std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}

TEST(CostArtifacts, TrainingRun) {
  const std::string dir = TestTempDir("gk_cost_artifacts");
  auto r = ReadTrainingRun(Write(dir, "run.json", R"({"wall_time_s": 7200, "tokens": 3600000, "resumed_from": null})"));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_DOUBLE_EQ(r->wall_s, 7200);
  EXPECT_DOUBLE_EQ(r->tokens_per_s, 500);
  EXPECT_FALSE(r->resumed);
  EXPECT_NE(ReadTrainingRun(Write(dir, "bad.json", "{")).message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(ReadTrainingRun(Write(dir, "nowall.json", R"({"tokens": 1})")).message().find("missing field 'wall_time_s'"),
            std::string::npos);
  EXPECT_FALSE(ReadTrainingRun(dir + "/absent.json").ok());
  EXPECT_NE(ReadTrainingRun(Write(dir, "huge.json", R"({"wall_time_s": 1e999})")).message().find("number overflow"),
            std::string::npos);
}

// A sweep point whose "input_len" is a string made nlohmann's value() throw (an abort before).
TEST(CostArtifacts, FieldsOfTheWrongTypeAreErrors) {
  const std::string dir = TestTempDir("gk_cost_artifacts_types");
  const std::string sweep = Write(dir, "sweep.json", R"({"gemmakit_sweep": 1, "points": [{"input_len": "8"}]})");
  auto r = ReadServingResult(sweep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message().rfind(sweep + ": ", 0), 0u) << r.message();
  EXPECT_EQ(r.message().find('\n'), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(CostArtifacts, ServingResultsAndSweeps) {
  const std::string dir = TestTempDir("gk_cost_artifacts");
  const std::string result = Write(dir, "r.json", R"({"request_rate": 4.0, "completed": 10, "total_input_tokens": 5120,
      "total_output_tokens": 2560, "output_throughput": 100.5, "median_tpot_ms": 9})");
  auto r = ReadServingResult(result);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].input_len, 512);  // a plain vLLM result: mean lengths per request
  EXPECT_EQ((*r)[0].output_len, 256);
  const std::string sweep = Write(dir, "s.json", R"({"gemmakit_sweep": 1, "points": [
      {"input_len": 512, "output_len": 256, "request_rate": 4.0, "output_throughput": 90},
      {"input_len": 512, "output_len": 256, "request_rate": "inf", "output_throughput": 140},
      {"input_len": 4096, "output_len": 512, "request_rate": 4.0, "output_throughput": 60}]})");
  auto s = ReadServingResult(sweep);
  ASSERT_TRUE(s.ok()) << s.message();
  const auto w = BestPerWorkload(*s);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].Label(), "512 in / 256 out");
  EXPECT_DOUBLE_EQ(w[0].best.output_throughput, 140);
  EXPECT_EQ(w[0].best.request_rate, "inf");
  EXPECT_EQ(w[0].points, 2);
  EXPECT_NE(ReadServingResult(Write(dir, "x.json", R"({"gemmakit_sweep": 1})")).message().find("without 'points'"),
            std::string::npos);
  EXPECT_NE(ReadServingResult(Write(dir, "y.json", R"({"output_throughput": "fast"})")).message().find("not a number"),
            std::string::npos);
}

}  // namespace
}  // namespace gk::cost
