// Where SIGTERM and SIGINT are handled: on a thread of their own, never on a compute thread.
//
// A process-directed signal runs its handler on whichever thread does not block it. Taken by a
// thread inside one of oneDNN's JIT GEMM kernels, it corrupted the heap: `train` stopped by
// SIGTERM aborted with "corrupted size vs. prev_size" in 8 of 25 tries, and in none of 12 with
// GEMMAKIT_SGEMM=openblas. A blocked signal also interrupts no system call.
#pragma once

namespace gk {

// Installs `handler` for SIGTERM and SIGINT (it must be async-signal-safe: store to atomics),
// starts a thread that leaves both unblocked and sleeps, and blocks both in the calling thread,
// so that every thread it starts afterwards (the thread pool, OpenMP's team, the HTTP server's)
// blocks them too. Call it once, before any worker thread is started. Threads that libraries
// start before main (OpenBLAS's, at load) can still take a signal; they run only OpenBLAS.
void InstallStopHandler(void (*handler)(int));

// Unblocks every signal in the calling thread: for a child between fork and exec, which would
// otherwise inherit the blocked mask through exec. Async-signal-safe.
void UnblockAllSignals();

}  // namespace gk
