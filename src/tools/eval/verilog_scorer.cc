#include "tools/eval/verilog_scorer.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>

#include "tools/eval/candidate_audit.h"
#include "tools/eval/sandbox.h"
#include "tools/eval/vvp_design.h"
#include "util/atomic_file.h"
#include "util/clock.h"

namespace gk::eval {

namespace {

constexpr const char* kResultDisplay = "$display(\"Mismatches: ";
constexpr size_t kLogBytes = 4096;

std::string RandomHex() {
  std::random_device rd;
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

std::string Nonce() { return "GKRESULT-" + RandomHex() + " "; }

// What iverilog and vvp need to read besides the scratch directory: the dynamic loader's
// cache, the system's libraries and iverilog's own tree (ivl, ivlpp, the .vpi modules), also
// when installed under another prefix (/opt/iverilog/bin/iverilog -> /opt/iverilog).
std::vector<std::string> SystemReadablePaths(const std::vector<std::string>& programs) {
  std::vector<std::string> paths = {"/usr", "/lib", "/lib64", "/etc/ld.so.cache"};
  for (const auto& program : programs) {
    std::error_code ec;
    const auto real = std::filesystem::canonical(program, ec);
    if (!ec) paths.push_back(real.parent_path().parent_path().string());
  }
  return paths;
}

// The first non-empty line: iverilog reports the cause first.
std::string FirstLine(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t") != std::string::npos) return line;
  }
  return "";
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

// iverilog's warning for a defparam it could not resolve ("warning: Scope of tb.x.N not found.",
// "warning: parameter W not found in tb.good1."), or "".
std::string UnresolvedDefparam(const std::string& compiler_output) {
  std::istringstream in(compiler_output);
  for (std::string line; std::getline(in, line);) {
    if (line.find("warning: Scope of ") != std::string::npos ||
        (line.find("warning: parameter ") != std::string::npos && line.find(" not found in ") != std::string::npos)) {
      return line;
    }
  }
  return "";
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
    case SampleCategory::kForbidden: return "forbidden_construct";
    case SampleCategory::kIncompleteRun: return "incomplete_run";
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
                                const ScoreOptions& o, long long expected_samples) {
  GK_ASSIGN_OR_RETURN(std::string iverilog, FindProgram(o.iverilog));
  GK_ASSIGN_OR_RETURN(std::string vvp, FindProgram(o.vvp));
  std::string root = o.scratch_root;
  if (root.empty()) root = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string tmpl = root + "/gk-eval-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    return Result<SampleScore>::Error(StrCat("cannot create a scratch directory in ", root, ": ", std::strerror(errno)));
  }
  const std::string dir = tmpl, solo = dir + "/alone";
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
  // The sentinel module follows the candidate when it is compiled alone: a candidate that leaves
  // a comment or `ifdef open swallows it (and, with the testbench, the testbench's first lines).
  const std::string sentinel = "gk_sentinel_" + RandomHex();
  std::error_code ec;
  std::filesystem::create_directory(solo, ec);
  if (ec) return Result<SampleScore>::Error(StrCat("cannot create ", solo, ": ", ec.message()));
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/RefModule.sv", ref_sv));
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/TopModule.sv", candidate));
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/test.sv", test));
  GK_RETURN_IF_ERROR(WriteFileAtomic(solo + "/TopModule.sv", candidate));
  GK_RETURN_IF_ERROR(WriteFileAtomic(solo + "/sentinel.sv", "module " + sentinel + ";\nendmodule\n"));

  const std::vector<std::string> readable = SystemReadablePaths({iverilog, vvp});
  auto compile = [&](const std::string& cwd, std::vector<std::string> args) {
    SandboxSpec spec;
    spec.argv = {iverilog, "-g2012"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.cwd = cwd;
    spec.writable_dir = cwd;
    spec.readable_paths = readable;
    spec.env = {"TMPDIR=" + cwd};  // the driver's temporary files stay in the sandbox
    spec.restrict = o.sandbox;
    spec.wall_s = o.compile_timeout_s;
    return RunSandboxed(spec);
  };

  SampleScore score;
  const double start = NowSeconds();
  auto finish = [&](SampleCategory category, const std::string& log) {
    score.category = category;
    score.log = Excerpt(log);
    score.seconds = NowSeconds() - start;
    return score;
  };
  const std::vector<std::string> sources = {"RefModule.sv", "TopModule.sv", "test.sv"};
  std::vector<std::string> args = {"-o", "a.out"};
  args.insert(args.end(), sources.begin(), sources.end());
  GK_ASSIGN_OR_RETURN(ProcessOutcome c, compile(dir, args));
  if (c.timed_out || c.exit_code != 0) {
    return finish(c.timed_out ? SampleCategory::kCompileTimeout : SampleCategory::kCompileError, c.err + c.out);
  }

  // Modules the candidate defines but never instantiates would be top-level modules of the
  // testbench's simulation, unaudited: compile again with the testbench's top modules only.
  GK_ASSIGN_OR_RETURN(std::string assembly, ReadFile(dir + "/a.out"));
  std::vector<std::string> tops;
  bool candidate_top = false;
  for (const VvpScope& sc : ParseVvp(assembly).scopes) {
    if (!sc.root || sc.kind != "module") continue;
    if (sc.file == "TopModule.sv") {
      candidate_top = true;
    } else {
      tops.push_back(sc.name);
    }
  }
  if (candidate_top && !tops.empty()) {
    std::vector<std::string> rooted = {"-o", "a.out"};
    for (const auto& t : tops) rooted.insert(rooted.end(), {"-s", t});
    rooted.insert(rooted.end(), sources.begin(), sources.end());
    GK_ASSIGN_OR_RETURN(c, compile(dir, rooted));
    if (c.timed_out || c.exit_code != 0) {
      return finish(c.timed_out ? SampleCategory::kCompileTimeout : SampleCategory::kCompileError, c.err + c.out);
    }
  }
  const std::string compile_log = c.err + c.out;

  // The candidate alone: it must elaborate without the testbench, and pass the audit.
  GK_ASSIGN_OR_RETURN(ProcessOutcome a,
                      compile(solo, {"-s", "TopModule", "-s", sentinel, "-o", "alone.vvp", "TopModule.sv", "sentinel.sv"}));
  if (a.timed_out || a.exit_code != 0) {
    const std::string out = a.err + a.out;
    const bool swallowed = out.find("root module \"" + sentinel) != std::string::npos &&
                           out.find("root module \"TopModule") == std::string::npos;
    score.reason = swallowed
                       ? "leaves a comment or `ifdef open at its end, which would swallow the testbench's first lines"
                       : StrCat("does not compile on its own, so it reaches outside its own modules: ", FirstLine(out));
    if (a.timed_out) score.reason = "compiling it on its own ran out of time";
    return finish(SampleCategory::kForbidden, score.reason + "\n" + out);
  }
  // iverilog only warns about a defparam whose target it cannot find: alone, that target is
  // outside the candidate's modules (tb.stim1.N), so inside the testbench it could be found.
  if (std::string w = UnresolvedDefparam(a.err + a.out); !w.empty()) {
    score.reason = "a defparam names something outside its own modules: " + w;
    return finish(SampleCategory::kForbidden, score.reason + "\n" + compile_log);
  }
  GK_ASSIGN_OR_RETURN(std::string alone, ReadFile(solo + "/alone.vvp"));
  score.reason = AuditCandidate(ParseVvp(alone));
  if (!score.reason.empty()) return finish(SampleCategory::kForbidden, score.reason + "\n" + compile_log);

  SandboxSpec run;
  run.argv = {vvp, "-n", "a.out", "-none"};
  run.cwd = dir;
  run.writable_dir = dir;
  run.readable_paths = readable;
  run.allowed_executables = {vvp};  // the simulation itself may start nothing
  run.restrict = o.sandbox;
  run.wall_s = o.run_timeout_s;
  GK_ASSIGN_OR_RETURN(ProcessOutcome r, RunSandboxed(run));
  score.seconds = NowSeconds() - start;
  score.log = Excerpt(compile_log + r.out + r.err);
  if (r.timed_out) {  // never read a killed simulator's output
    score.category = SampleCategory::kRunTimeout;
    return score;
  }
  const Verdict v = tagged ? Judge(r.out, r.err, tag) : JudgeUntagged(r.out, r.err);
  score.category = v.category;
  score.mismatches = v.e;
  score.samples = v.n;
  if (v.category == SampleCategory::kPass && expected_samples > 0 && v.n != expected_samples) {
    score.category = SampleCategory::kIncompleteRun;
    score.reason = StrCat("the testbench counted ", v.n, " samples where the reference solution gives ", expected_samples);
    score.log = score.reason + "\n" + score.log;
  }
  score.passed = score.category == SampleCategory::kPass;
  // The nonce never appears in a report.
  for (size_t p = 0; (p = score.log.find(tag, p)) != std::string::npos;) score.log.erase(p, tag.size());
  return score;
}

std::string ReferenceAsCandidate(const std::string& ref_sv) {
  static const std::regex kModule(R"(\bmodule(\s+)RefModule\b)");
  return std::regex_replace(ref_sv, kModule, "module$1TopModule", std::regex_constants::format_first_only);
}

}  // namespace gk::eval
