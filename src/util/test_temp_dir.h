// Temp directories for unit tests. ctest runs every test case in its own process, two at a
// time, so a fixed name like /tmp/gk_x_tiny is written by one case while another removes it;
// the process id keeps each process's directories apart.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace gk {

// <tmp>/<name>_<pid>, removed first (a previous run with the same pid may have left it).
inline std::string TestTempDir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

}  // namespace gk
