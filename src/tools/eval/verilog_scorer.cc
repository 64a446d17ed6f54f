#include "tools/eval/verilog_scorer.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "tools/eval/sandbox.h"
#include "util/atomic_file.h"
#include "util/clock.h"

namespace gk::eval {

namespace {

constexpr const char* kResultDisplay = "$display(\"Mismatches: ";
constexpr size_t kLogBytes = 4096;

std::string Nonce() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "GKRESULT-%08x%08x ", rd(), rd());
  return buf;
}

// Parses "Mismatches: E in N samples" starting at `p` (whitespace as the reference regex
// allows); false when the text there does not have that shape.
bool ParseResult(std::string_view s, long long* e, long long* n) {
  auto skip_ws = [&](size_t i) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return i;
  };
  auto number = [&](size_t* i, long long* v) {
    const size_t start = *i;
    *v = 0;
    while (*i < s.size() && std::isdigit(static_cast<unsigned char>(s[*i])) && *v < (1ll << 50)) {
      *v = *v * 10 + (s[*i] - '0');
      ++*i;
    }
    return *i > start;
  };
  if (!s.starts_with("Mismatches:")) return false;
  size_t i = skip_ws(11);
  if (!number(&i, e)) return false;
  const size_t before_in = i;
  i = skip_ws(i);
  if (i == before_in || s.substr(i, 2) != "in") return false;
  const size_t after_in = i + 2;
  i = skip_ws(after_in);
  if (i == after_in || !number(&i, n)) return false;
  const size_t before_samples = i;
  i = skip_ws(i);
  return i > before_samples && s.substr(i, 7) == "samples";
}

std::string Excerpt(const std::string& text) {
  if (text.size() <= kLogBytes) return text;
  return text.substr(0, kLogBytes / 2) + "\n...\n" + text.substr(text.size() - kLogBytes / 2);
}

struct Verdict {
  SampleCategory category = SampleCategory::kNoResult;
  long long e = -1, n = -1;
};

// The testbench's tagged line decides; any other "Mismatches:" is forged.
Verdict Judge(const std::string& out, const std::string& err, const std::string& tag) {
  Verdict v;
  int tagged = 0, untagged = 0;
  auto scan = [&](const std::string& text, bool is_stdout) {
    size_t pos = 0;
    while ((pos = text.find("Mismatches:", pos)) != std::string::npos) {
      const bool has_tag = is_stdout && !tag.empty() && pos >= tag.size() &&
                           text.compare(pos - tag.size(), tag.size(), tag) == 0;
      long long e = -1, n = -1;
      if (has_tag && ParseResult(std::string_view(text).substr(pos), &e, &n)) {
        ++tagged;
        v.e = e;
        v.n = n;
      } else {
        ++untagged;
      }
      pos += 11;
    }
  };
  scan(out, true);
  scan(err, false);
  if (untagged > 0 || tagged > 1) {
    v.category = SampleCategory::kTampered;
  } else if (tagged == 1) {
    v.category = v.e == 0 && v.n > 0 ? SampleCategory::kPass : SampleCategory::kMismatch;
  }
  return v;
}

// Without the standard display line (a testbench of another shape): the reference harness's
// rule, the first match anywhere, pass iff E == 0 and N > 0; no line is no result.
Verdict JudgeUntagged(const std::string& out, const std::string& err) {
  Verdict v;
  const std::string text = out + "\n" + err;
  size_t pos = text.find("Mismatches:");
  while (pos != std::string::npos) {
    if (ParseResult(std::string_view(text).substr(pos), &v.e, &v.n)) {
      v.category = v.e == 0 && v.n > 0 ? SampleCategory::kPass : SampleCategory::kMismatch;
      return v;
    }
    pos = text.find("Mismatches:", pos + 11);
  }
  return v;
}

}  // namespace

const char* CategoryName(SampleCategory c) {
  switch (c) {
    case SampleCategory::kPass: return "pass";
    case SampleCategory::kCompileError: return "compile_error";
    case SampleCategory::kCompileTimeout: return "compile_timeout";
    case SampleCategory::kRunTimeout: return "run_timeout";
    case SampleCategory::kMismatch: return "mismatch";
    case SampleCategory::kNoResult: return "no_result";
    case SampleCategory::kTampered: return "tampered";
  }
  return "?";
}

Result<std::string> IverilogVersion(const ScoreOptions& o) {
  auto exe = FindProgram(o.iverilog);
  if (!exe.ok()) return Result<std::string>::Error(StrCat(exe.message(), " (apt-get install iverilog)"));
  if (!FindProgram(o.vvp).ok()) return Result<std::string>::Error(StrCat(o.vvp, " not found (apt-get install iverilog)"));
  SandboxSpec s;
  s.argv = {*exe, "-V"};
  s.cwd = "/";
  s.restrict = false;
  s.wall_s = 30;
  GK_ASSIGN_OR_RETURN(ProcessOutcome r, RunSandboxed(s));
  const std::string text = r.out + r.err;
  const size_t nl = text.find('\n');
  return text.substr(0, nl);
}

Result<SampleScore> ScoreSample(const std::string& candidate, const std::string& ref_sv, const std::string& test_sv,
                                const ScoreOptions& o) {
  GK_ASSIGN_OR_RETURN(std::string iverilog, FindProgram(o.iverilog));
  GK_ASSIGN_OR_RETURN(std::string vvp, FindProgram(o.vvp));
  std::string root = o.scratch_root;
  if (root.empty()) root = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string tmpl = root + "/gk-eval-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    return Result<SampleScore>::Error(StrCat("cannot create a scratch directory in ", root, ": ", std::strerror(errno)));
  }
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    bool keep;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir, o.keep_scratch};

  // Tag the testbench's own result line with a nonce the candidate cannot know.
  const std::string tag = Nonce();
  std::string test = test_sv;
  size_t found = 0, pos = 0;
  while ((pos = test.find(kResultDisplay, pos)) != std::string::npos) {
    test.insert(pos + 10, tag);  // after $display("
    pos += std::strlen(kResultDisplay) + tag.size();
    ++found;
  }
  const bool tagged = found == 1;
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/RefModule.sv", ref_sv));
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/TopModule.sv", candidate));
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/test.sv", test));

  SampleScore score;
  const double start = NowSeconds();
  SandboxSpec compile;
  compile.argv = {iverilog, "-g2012", "-o", "a.out", "RefModule.sv", "TopModule.sv", "test.sv"};
  compile.cwd = dir;
  compile.writable_dir = dir;
  compile.env = {"TMPDIR=" + dir};  // the driver's temporary files stay in the sandbox
  compile.restrict = o.sandbox;
  compile.wall_s = o.compile_timeout_s;
  GK_ASSIGN_OR_RETURN(ProcessOutcome c, RunSandboxed(compile));
  if (c.timed_out || c.exit_code != 0) {
    score.category = c.timed_out ? SampleCategory::kCompileTimeout : SampleCategory::kCompileError;
    score.log = Excerpt(c.err + c.out);
    score.seconds = NowSeconds() - start;
    return score;
  }
  SandboxSpec run;
  run.argv = {vvp, "-n", "a.out", "-none"};
  run.cwd = dir;
  run.writable_dir = dir;
  run.allowed_executables = {vvp};  // the simulation itself may start nothing
  run.restrict = o.sandbox;
  run.wall_s = o.run_timeout_s;
  GK_ASSIGN_OR_RETURN(ProcessOutcome r, RunSandboxed(run));
  score.seconds = NowSeconds() - start;
  score.log = Excerpt(c.err + c.out + r.out + r.err);
  if (r.timed_out) {  // never read a killed simulator's output
    score.category = SampleCategory::kRunTimeout;
    return score;
  }
  const Verdict v = tagged ? Judge(r.out, r.err, tag) : JudgeUntagged(r.out, r.err);
  score.category = v.category;
  score.mismatches = v.e;
  score.samples = v.n;
  score.passed = v.category == SampleCategory::kPass;
  // The nonce never appears in a report.
  for (size_t p = 0; (p = score.log.find(tag, p)) != std::string::npos;) score.log.erase(p, tag.size());
  return score;
}

}  // namespace gk::eval
