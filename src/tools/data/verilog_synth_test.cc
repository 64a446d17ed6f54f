#include "tools/data/verilog_synth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::data {
namespace {

namespace fs = std::filesystem;

const char kIntro[] =
    "\nI would like you to implement a module named TopModule with the following\n"
    "interface. All input and output ports are one bit unless otherwise\nspecified.\n\n - ";
const char kResultLine[] = "$display(\"Mismatches: %1d in %1d samples\", stats1.errors, stats1.clocks);";

std::vector<VerilogTask> Make(int64_t n, uint64_t seed, int64_t first = 0) {
  VerilogSynthOptions o;
  o.n = n;
  o.seed = seed;
  o.first = first;
  auto r = SynthesizeVerilogTasks(o);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::vector<VerilogTask>{};
}

std::string Slug(const std::string& name) { return name.substr(name.find('_') + 1); }

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(VerilogSynth, CatalogueIsLargeAndCoversEveryFamily) {
  EXPECT_GE(VerilogSynthCatalogueSize(), 3000u);
  const auto families = VerilogSynthFamilies();
  std::set<std::string> names;
  size_t total = 0;
  for (const auto& [name, n] : families) {
    names.insert(name);
    total += n;
    EXPECT_GE(n, 30u) << name;
  }
  EXPECT_EQ(total, VerilogSynthCatalogueSize());
  for (const char* f : {"gates", "reduce", "truthtable", "mux", "decode", "prio", "addsub", "compare", "bits",
                        "shifter", "counter", "shiftreg", "seqdet", "fsm", "edge", "register"}) {
    EXPECT_TRUE(names.count(f)) << f;
  }
}

TEST(VerilogSynth, SameSeedSameTasks) {
  const auto a = Make(40, 7), b = Make(40, 7);
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].ref, b[i].ref);
    EXPECT_EQ(a[i].test, b[i].test);
    EXPECT_EQ(VerilogSftRow(a[i]), VerilogSftRow(b[i]));
  }
}

TEST(VerilogSynth, SeedReordersButATaskNeverChanges) {
  const auto a = Make(30, 1), b = Make(30, 2);
  std::vector<std::string> na, nb;
  for (const auto& t : a) na.push_back(t.name);
  for (const auto& t : b) nb.push_back(t.name);
  EXPECT_NE(na, nb);
  // The whole catalogue under another seed holds the same task, byte for byte (but its number).
  const auto all = Make(int64_t(VerilogSynthCatalogueSize()), 2);
  std::map<std::string, const VerilogTask*> by_slug;
  for (const auto& t : all) by_slug[Slug(t.name)] = &t;
  for (const auto& t : a) {
    ASSERT_TRUE(by_slug.count(Slug(t.name))) << t.name;
    EXPECT_EQ(by_slug[Slug(t.name)]->test, t.test);
    EXPECT_EQ(by_slug[Slug(t.name)]->ref, t.ref);
  }
}

TEST(VerilogSynth, NamesAreUniqueNumberedAndWindowsAreDisjoint) {
  const int64_t size = int64_t(VerilogSynthCatalogueSize());
  const auto all = Make(size, 5);
  ASSERT_EQ(int64_t(all.size()), size);
  std::set<std::string> names, slugs;
  const std::regex shape("Prob[0-9]{4}_[a-z0-9_]+");
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(std::regex_match(all[i].name, shape)) << all[i].name;
    char number[32];
    std::snprintf(number, sizeof(number), "Prob%04zu_", i + 1);
    EXPECT_TRUE(all[i].name.starts_with(number)) << all[i].name;
    names.insert(all[i].name);
    slugs.insert(Slug(all[i].name));
  }
  EXPECT_EQ(int64_t(names.size()), size);
  EXPECT_EQ(int64_t(slugs.size()), size);
  // A window is the matching slice of the full order, so two windows never share a task.
  const auto train = Make(100, 5, 0), eval = Make(50, 5, 100);
  for (size_t i = 0; i < train.size(); ++i) EXPECT_EQ(train[i].name, all[i].name);
  for (size_t i = 0; i < eval.size(); ++i) EXPECT_EQ(eval[i].name, all[100 + i].name);
}

TEST(VerilogSynth, SmallWindowsMixTheFamilies) {
  std::set<std::string> families;
  for (const auto& t : Make(48, 3)) families.insert(t.family);
  EXPECT_EQ(families.size(), VerilogSynthFamilies().size());
}

TEST(VerilogSynth, FilesFollowTheVerilogEvalShape) {
  for (const auto& t : Make(int64_t(VerilogSynthCatalogueSize()), 1)) {
    EXPECT_TRUE(t.prompt.starts_with(kIntro)) << t.name;
    EXPECT_TRUE(t.ref.starts_with("module RefModule (\n")) << t.name;
    EXPECT_EQ(Count(t.ref, "module "), 1u) << t.name;
    EXPECT_EQ(Count(t.ref, "endmodule"), 1u) << t.name;
    EXPECT_TRUE(t.test.starts_with("`timescale 1 ps/1 ps\n")) << t.name;
    EXPECT_EQ(Count(t.test, kResultLine), 1u) << t.name;
    EXPECT_EQ(Count(t.test, "$display(\"Mismatches: "), 1u) << t.name;  // the scorer tags exactly one line
    for (const char* needle :
         {"module stimulus_gen (", "module tb();", "RefModule good1 (", "TopModule top_module1 (", "stats1.clocks++",
          "stats1.errors++", "#1000000;", "$display(\"TIMEOUT\");", "final begin"}) {
      EXPECT_NE(t.test.find(needle), std::string::npos) << t.name << " lacks " << needle;
    }
    // Port bullets: every line between the intro and the first blank line is one port.
    const auto lines = Lines(t.prompt.substr(std::string(kIntro).size() - 3));
    size_t ports = 0;
    for (const auto& line : lines) {
      if (line.empty()) break;
      EXPECT_TRUE(line.starts_with(" - input  ") || line.starts_with(" - output ")) << t.name << ": " << line;
      ++ports;
    }
    EXPECT_GE(ports, 2u) << t.name;
    for (const auto& line : Lines(t.prompt)) EXPECT_LE(line.size(), 100u) << t.name << ": " << line;
  }
}

TEST(VerilogSynth, SftRowsAreCodeVR1Shaped) {
  const std::regex shape(R"(<think>\n[^]+\n</think>\n<answer>\n```verilog\n([^]*)```\n</answer>)");
  for (const auto& t : Make(200, 11)) {
    const std::string line = VerilogSftRow(t);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.size(), 3u);
    std::vector<std::string> keys;
    const auto ordered = nlohmann::ordered_json::parse(line);
    for (auto it = ordered.begin(); it != ordered.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"system", "prompt", "response"}));
    EXPECT_EQ(j["system"].get<std::string>(), kVerilogSftSystem);
    const std::string prompt = j["prompt"].get<std::string>();
    EXPECT_TRUE(prompt.starts_with("I would like you to implement a module named TopModule with the following"))
        << t.name;
    EXPECT_EQ("\n" + prompt + "\n", t.prompt) << t.name;
    const std::string response = j["response"].get<std::string>();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(response, m, shape)) << response;
    EXPECT_EQ(m[1].str(), RenameToTopModule(t.ref));
    EXPECT_TRUE(m[1].str().starts_with("module TopModule (\n"));
    EXPECT_EQ(m[1].str().find("RefModule"), std::string::npos);
  }
}

TEST(VerilogSynth, RenameTouchesOnlyTheModuleName) {
  EXPECT_EQ(RenameToTopModule("module RefModule (\n  input a\n);\nendmodule\n"),
            "module TopModule (\n  input a\n);\nendmodule\n");
}

TEST(VerilogSynth, WritesTheLayout) {
  const std::string out = TestTempDir("gk_synth_layout");
  const auto tasks = Make(12, 4);
  ASSERT_TRUE(WriteVerilogTasks(tasks, out).ok());
  const fs::path data = fs::path(out) / "dataset_spec-to-rtl";
  auto problems = ReadFile((data / "problems.txt").string());
  ASSERT_TRUE(problems.ok());
  std::string expect;
  for (const auto& t : tasks) expect += t.name + "\n";
  EXPECT_EQ(*problems, expect);
  for (const auto& t : tasks) {
    auto prompt = ReadFile((data / (t.name + "_prompt.txt")).string());
    auto ref = ReadFile((data / (t.name + "_ref.sv")).string());
    auto test = ReadFile((data / (t.name + "_test.sv")).string());
    ASSERT_TRUE(prompt.ok() && ref.ok() && test.ok()) << t.name;
    EXPECT_EQ(*prompt, t.prompt);
    EXPECT_EQ(*ref, t.ref);
    EXPECT_EQ(*test, t.test);
  }
  auto sft = ReadFile(out + "/sft.jsonl");
  ASSERT_TRUE(sft.ok());
  const auto rows = Lines(*sft);
  ASSERT_EQ(rows.size(), tasks.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i], VerilogSftRow(tasks[i]));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(data)) files += e.is_regular_file();
  EXPECT_EQ(files, 3 * tasks.size() + 1);  // no temporaries left behind
  // Writing the same tasks again is fine; another window into the same directory is refused.
  EXPECT_TRUE(WriteVerilogTasks(tasks, out).ok());
  const Status mixed = WriteVerilogTasks(Make(5, 4, 12), out);
  EXPECT_FALSE(mixed.ok());
  EXPECT_NE(mixed.message().find("already holds"), std::string::npos) << mixed.message();
  fs::remove_all(out);
}

TEST(VerilogSynth, BadArgumentsAreErrors) {
  VerilogSynthOptions o;
  o.n = 0;
  auto r = SynthesizeVerilogTasks(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--n 0"), std::string::npos) << r.message();
  o.n = -3;
  EXPECT_FALSE(SynthesizeVerilogTasks(o).ok());
  o.n = 5;
  o.first = -1;
  EXPECT_FALSE(SynthesizeVerilogTasks(o).ok());
  o.first = int64_t(VerilogSynthCatalogueSize()) - 4;
  r = SynthesizeVerilogTasks(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("distinct tasks"), std::string::npos) << r.message();
  o.first = int64_t(VerilogSynthCatalogueSize()) - 5;
  EXPECT_TRUE(SynthesizeVerilogTasks(o).ok());
  o.first = 0;
  o.n = INT64_MAX;
  EXPECT_FALSE(SynthesizeVerilogTasks(o).ok());

  EXPECT_FALSE(WriteVerilogTasks({}, TestTempDir("gk_synth_empty")).ok());
  // An --out below a regular file cannot be created (permissions would not stop root).
  const std::string dir = TestTempDir("gk_synth_blocked");
  fs::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomic(dir + "/file", "x").ok());
  const Status s = WriteVerilogTasks(Make(2, 1), dir + "/file/out");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create directory"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gk::data
