#include "tools/eval/sandbox.h"

#include <elf.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/stop_signals.h"

namespace gk::eval {

namespace {

// Rights this code knows, by the ABI that introduced them.
uint64_t HandledAccess(int abi, bool restrict_exec, bool restrict_read) {
  uint64_t a = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
               LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
               LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
               LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) a |= 1ull << 13;  // REFER
  if (abi >= 3) a |= 1ull << 14;  // TRUNCATE
  if (restrict_exec) a |= LANDLOCK_ACCESS_FS_EXECUTE;
  if (restrict_read) a |= LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
  return a;
}

// Child side, between fork and exec: only async-signal-safe calls. Exits 127 on any failure.
[[noreturn]] void ChildExec(const SandboxSpec& spec, const std::vector<std::string>& executables, int abi, int out_fd,
                            int err_fd, char* const* argv, char* const* envp) {
  setpgid(0, 0);
  UnblockAllSignals();  // a mask survives exec: the simulator must die of the SIGKILL/SIGTERM it gets
  const int in = open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(127);
  if (chdir(spec.cwd.c_str()) != 0) _exit(127);
  const rlim_t cpu = static_cast<rlim_t>(std::ceil(spec.wall_s)) + 1;
  const rlimit limits[] = {{cpu, cpu},
                           {static_cast<rlim_t>(spec.max_file_bytes), static_cast<rlim_t>(spec.max_file_bytes)},
                           {static_cast<rlim_t>(spec.max_address_space_bytes),
                            static_cast<rlim_t>(spec.max_address_space_bytes)},
                           {static_cast<rlim_t>(spec.max_open_files), static_cast<rlim_t>(spec.max_open_files)},
                           {0, 0}};
  const int which[] = {RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_AS, RLIMIT_NOFILE, RLIMIT_CORE};
  for (int i = 0; i < 5; ++i) setrlimit(which[i], &limits[i]);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(127);
  if (spec.restrict) {
    const bool restrict_exec = !executables.empty();
    const uint64_t handled = HandledAccess(abi, restrict_exec, !spec.readable_paths.empty());
    landlock_ruleset_attr attr{};
    attr.handled_access_fs = handled;
    const int rs = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0));
    if (rs < 0) _exit(127);
    auto allow = [&](const char* path, uint64_t access) {
      const int fd = open(path, O_PATH | O_CLOEXEC);
      if (fd < 0) return;  // absent library directories are fine
      struct stat st {};
      if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) {
        access &= LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
                  (abi >= 3 ? 1ull << 14 : 0);
      }
      landlock_path_beneath_attr pb{};
      pb.allowed_access = access & handled;
      pb.parent_fd = fd;
      syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
      close(fd);
    };
    if (!spec.writable_dir.empty()) allow(spec.writable_dir.c_str(), handled & ~uint64_t{LANDLOCK_ACCESS_FS_EXECUTE});
    for (const auto& exe : executables) allow(exe.c_str(), LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE);
    for (const auto& path : spec.readable_paths) {
      allow(path.c_str(), LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR);
    }
    if (syscall(SYS_landlock_restrict_self, rs, 0) != 0) _exit(127);
    close(rs);
  }
  execve(argv[0], argv, envp);
  _exit(127);
}

// PT_INTERP of an ELF64 executable, resolved to a real path; "" when there is none.
std::string ElfInterpreter(const std::string& path) {
  auto data = ReadFile(path);
  if (!data.ok() || data->size() < sizeof(Elf64_Ehdr)) return "";
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data->data());
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) return "";
  for (int i = 0; i < eh->e_phnum; ++i) {
    const size_t off = eh->e_phoff + static_cast<size_t>(i) * eh->e_phentsize;
    if (off + sizeof(Elf64_Phdr) > data->size()) return "";
    const auto* ph = reinterpret_cast<const Elf64_Phdr*>(data->data() + off);
    if (ph->p_type != PT_INTERP || ph->p_offset + ph->p_filesz > data->size()) continue;
    std::string interp(data->data() + ph->p_offset, strnlen(data->data() + ph->p_offset, ph->p_filesz));
    std::error_code ec;
    const auto real = std::filesystem::canonical(interp, ec);
    return ec ? interp : real.string();
  }
  return "";
}

std::string ReadCapped(const std::string& path) {
  auto r = ReadFile(path);
  if (!r.ok()) return "";
  std::string s = std::move(*r);
  constexpr size_t kKeep = 32 * 1024;
  if (s.size() > 2 * kKeep) s = s.substr(0, kKeep) + "\n...\n" + s.substr(s.size() - kKeep);
  return s;
}

}  // namespace

int LandlockAbi() {
  const long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v > 0 ? static_cast<int>(v) : 0;
}

Result<std::string> FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return std::filesystem::absolute(name).string();
    return Result<std::string>::Error(StrCat(name, " is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t colon = p.find(':', pos);
    if (colon == std::string::npos) colon = p.size();
    const std::string candidate = p.substr(pos, colon - pos) + "/" + name;
    if (colon > pos && access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = colon + 1;
  }
  return Result<std::string>::Error(StrCat(name, " not found on PATH"));
}

Result<ProcessOutcome> RunSandboxed(const SandboxSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    return Result<ProcessOutcome>::Error("sandbox: argv[0] must be an absolute path");
  }
  const int abi = spec.restrict ? LandlockAbi() : 0;
  if (spec.restrict && abi == 0) {
    return Result<ProcessOutcome>::Error(
        "this kernel has no Landlock (Linux >= 5.13 with landlock in the LSM list): untrusted code cannot be "
        "sandboxed; pass --unsafe-no-sandbox to run it anyway");
  }
  // Output files outside the writable directory: the program cannot reopen them.
  char tmpl[] = "/tmp/gk-sandbox-XXXXXX";
  std::string dir = mkdtemp(tmpl) ? std::string(tmpl) : "";
  if (dir.empty()) return Result<ProcessOutcome>::Error(StrCat("sandbox: mkdtemp: ", std::strerror(errno)));
  const std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0) return Result<ProcessOutcome>::Error(StrCat("sandbox: ", std::strerror(errno)));

  // The kernel checks execute permission on the ELF interpreter too: allow it with each program.
  std::vector<std::string> executables;
  for (const auto& exe : spec.allowed_executables) {
    executables.push_back(exe);
    if (std::string interp = ElfInterpreter(exe); !interp.empty()) executables.push_back(interp);
  }
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  for (const auto& e : spec.env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const double start = NowSeconds();
  const pid_t pid = fork();
  if (pid < 0) return Result<ProcessOutcome>::Error(StrCat("sandbox: fork: ", std::strerror(errno)));
  if (pid == 0) ChildExec(spec, executables, abi, out_fd, err_fd, argv.data(), envp.data());
  setpgid(pid, pid);  // also from the parent, so the kill below cannot miss the group
  close(out_fd);
  close(err_fd);

  ProcessOutcome r;
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  int status = 0;
  for (;;) {
    const double left = spec.wall_s - (NowSeconds() - start);
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(std::ceil(std::min(left, 1.0) * 1000)));
    } else {
      usleep(2000);
    }
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
  }
  kill(-pid, SIGKILL);  // the whole group: at the limit, and any strays it left
  if (r.timed_out) waitpid(pid, &status, 0);
  if (pidfd >= 0) close(pidfd);
  r.seconds = NowSeconds() - start;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = ReadCapped(out_path);
  r.err = ReadCapped(err_path);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

}  // namespace gk::eval
