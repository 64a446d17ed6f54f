// Runs a program on untrusted input with a wall-clock limit and, where the kernel allows,
// inside a Landlock sandbox (Linux >= 5.13, no privileges needed):
//  - writes (create, write, truncate, remove, rename, link) only beneath `writable_dir`;
//  - with `allowed_executables` set, execve only of those files (plus the shared-library
//    directories the dynamic loader needs), so the program cannot start a shell;
//  - no new privileges; rlimits on CPU time, file size, address space, open files, core dumps;
//  - its own process group, SIGKILLed as a whole at the limit and after it exits (no strays);
//  - stdin /dev/null; stdout and stderr go to files outside `writable_dir`, read back after.
//  - with `readable_paths` set, reads (files and directory listings) only beneath those paths
//    and `writable_dir`, so untrusted code cannot read the reference solution or a secret.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace gk::eval {

struct SandboxSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::string cwd;
  std::vector<std::string> env;   // added to PATH=/usr/bin:/bin and LC_ALL=C, e.g. "TMPDIR=/x"
  std::string writable_dir;       // "" : no writes anywhere (when restricting)
  std::vector<std::string> allowed_executables;  // empty: exec not restricted
  std::vector<std::string> readable_paths;       // empty: reads not restricted
  bool restrict = true;           // false: limits and process group only (--unsafe-no-sandbox)
  double wall_s = 60;
  long long max_file_bytes = 64ll << 20;
  long long max_address_space_bytes = 8ll << 30;
  int max_open_files = 256;
};

struct ProcessOutcome {
  bool timed_out = false;
  int exit_code = -1;   // when it exited
  int signal = 0;       // when a signal ended it
  std::string out, err; // at most the first and last 32 KiB of each, joined by "\n...\n"
  double seconds = 0;
};

// The Landlock ABI version, or 0 when the kernel has none (then restrict = true fails).
int LandlockAbi();

// Errors: cannot fork or create the output files, restrict requested without Landlock. A
// program that cannot be executed (or is refused by the sandbox) exits with status 127.
Result<ProcessOutcome> RunSandboxed(const SandboxSpec& spec);

// The absolute path of a program: as given when it contains '/', else searched on $PATH.
Result<std::string> FindProgram(const std::string& name);

}  // namespace gk::eval
