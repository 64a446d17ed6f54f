#include "util/stop_signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace gk {
namespace {

std::atomic<pid_t> g_handled_on{0};
void RecordThread(int) { g_handled_on.store(pid_t(syscall(SYS_gettid))); }

bool Blocks(int sig) {
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, nullptr, &cur);
  return sigismember(&cur, sig) == 1;
}

// In a child process (the handler and the mask are process-wide): a signal sent while the
// calling thread and a thread it started afterwards are busy runs the handler on neither.
void SignalLandsOnItsOwnThread(int sig) {
  InstallStopHandler(RecordThread);
  if (!Blocks(SIGTERM) || !Blocks(SIGINT)) std::_Exit(2);
  std::atomic<pid_t> worker_tid{0};
  std::atomic<bool> worker_blocks{false}, stop{false};
  std::thread worker([&] {
    worker_blocks = Blocks(SIGTERM) && Blocks(SIGINT);
    worker_tid = pid_t(syscall(SYS_gettid));
    while (!stop.load()) {
    }
  });
  while (worker_tid.load() == 0) std::this_thread::yield();
  kill(getpid(), sig);
  for (int i = 0; i < 5000 && g_handled_on.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  worker.join();
  const pid_t on = g_handled_on.load();
  if (!worker_blocks.load()) std::_Exit(3);
  if (on == 0) std::_Exit(4);
  if (on == pid_t(syscall(SYS_gettid)) || on == worker_tid.load()) std::_Exit(5);
  std::_Exit(0);
}

TEST(StopSignals, SigtermRunsTheHandlerOffTheComputeThreads) {
  EXPECT_EXIT(SignalLandsOnItsOwnThread(SIGTERM), testing::ExitedWithCode(0), "");
}

TEST(StopSignals, SigintToo) { EXPECT_EXIT(SignalLandsOnItsOwnThread(SIGINT), testing::ExitedWithCode(0), ""); }

TEST(StopSignals, UnblockAllSignalsClearsTheMask) {
  EXPECT_EXIT(
      {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        if (!Blocks(SIGTERM)) std::_Exit(2);
        UnblockAllSignals();
        std::_Exit(Blocks(SIGTERM) ? 3 : 0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gk
