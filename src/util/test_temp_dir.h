// Temp directories for unit tests. ctest runs every test case in its own process, two at a
// time, so a fixed name like /tmp/gk_x_tiny is written by one case while another removes it;
// the process id keeps each process's directories apart.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace gk {

namespace test_temp_dir_internal {

struct Made {
  pid_t pid = ::getpid();
  std::vector<std::filesystem::path> dirs;
};

// The directories this process made, removed as it exits (a full `make test` used to leave
// ~0.7 GB of them in /tmp) unless a test failed, when they are left to look at, or
// GK_KEEP_TEST_DIRS is set. A forked child (the kill tests') exits without touching its parent's.
inline Made& MadeHere() {
  static Made* made = [] {
    auto* m = new Made;  // never destroyed: the exit handler below reads it
    std::atexit([] {
      const Made& mm = MadeHere();
      if (::getpid() != mm.pid || std::getenv("GK_KEEP_TEST_DIRS") != nullptr) return;
      if (::testing::UnitTest::GetInstance()->Failed()) return;
      std::error_code ec;
      for (const auto& d : mm.dirs) std::filesystem::remove_all(d, ec);
    });
    return m;
  }();
  return *made;
}

}  // namespace test_temp_dir_internal

// <tmp>/<name>_<pid>, removed first (a previous run with the same pid may have left it) and
// again when the process exits after its tests passed.
inline std::string TestTempDir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  test_temp_dir_internal::MadeHere().dirs.push_back(dir);
  return dir.string();
}

}  // namespace gk
