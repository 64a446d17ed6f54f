// The CUDA emulator's execution of one kernel launch: the blocks one after another, each
// block's threads as fibers scheduled in thread order until they meet at a barrier. A thread
// runs until it waits, so a missing __syncthreads shows as a thread reading what a later
// thread has not yet written. (Until a block's first wait its threads are plain calls on one
// stack, in the same order: RunThrough.) A GPU runs a block's warps in no set order, so
// GK_CUDA_EMULATOR_ORDER=reverse (threads and blocks last to first) or =shuffle:SEED (a seeded
// permutation of each block's threads, and of the blocks) shows the races the thread order
// hides: a read of what an earlier thread wrote, a write over what a later one has yet to
// read, a block that reads another's output. The checks a GPU would fail on (and some it
// would silently get wrong) end the process with a message naming the kernel, block and
// thread: shuffles over lanes that do not exist or have exited, threads waiting at different
// barriers.
#include "kernel_runner.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fibers.h"

namespace gk_emu {

thread_local const ThreadCoords* tls_coords = nullptr;

namespace {

constexpr size_t kStackBytes = size_t(256) << 10;

struct Warp {
  int live = 0;          // lanes that exist and have not exited
  int arrived = 0;       // lanes waiting at the warp's barrier
  int expected = 0;      // lanes the barrier waits for (the mask's)
  unsigned mask = 0;
  // Shuffles' values, in two banks: whole-warp shuffles alternate between them (WarpExchange).
  alignas(16) unsigned char slots[2][32][16];
};

struct Fiber {
  ThreadCoords coords;
  int linear = 0;
  int pos = 0;  // its place in the block's schedule (BlockRun::order)
  enum State { kReady, kWaitingBlock, kWaitingWarp, kDone } state = kReady;
  void* sp = nullptr;  // its saved context; none until it first runs as a fiber (ContextOf)
  unsigned whole_warp_shuffles = 0;  // this lane's, which every lane of its warp counts alike
};

// One launch's run: its blocks one after another, on this OS thread's fiber stacks.
struct BlockRun {
  const char* kernel = "";
  Entry entry = nullptr;
  void* closure = nullptr;
  std::vector<Fiber> fibers;
  std::vector<int> order;  // the schedule: fibers[order[0]] runs first (Schedule)
  std::vector<Warp> warps;
  std::vector<std::unique_ptr<FiberStack>>* stacks = nullptr;  // thread i's is [i]; RunThrough's the last
  unsigned char* smem_ptr = nullptr;  // dynamic shared memory (a kernel may ask __align__(128))
  std::vector<const void*> fresh;     // the static shared variables this block has filled (FreshShared)
  size_t smem_bytes = 0;
  void* scheduler_sp = nullptr;
  int current = -1;
  int live = 0;
  int arrived = 0;
};

thread_local BlockRun* tls_run = nullptr;

// The order the emulator runs threads and blocks in (SetScheduleOrder).
struct Schedule {
  enum Kind { kForward, kReverse, kShuffle } kind = kForward;
  uint64_t seed = 0;
};

bool ParseSchedule(const char* text, Schedule* out) {
  Schedule r;
  if (text == nullptr || *text == 0 || std::strcmp(text, "forward") == 0) {
  } else if (std::strcmp(text, "reverse") == 0) {
    r.kind = Schedule::kReverse;
  } else if (std::strncmp(text, "shuffle:", 8) == 0 && text[8] >= '0' && text[8] <= '9') {
    char* end = nullptr;
    r.seed = std::strtoull(text + 8, &end, 10);
    if (*end != 0) return false;
    r.kind = Schedule::kShuffle;
  } else {
    return false;
  }
  *out = r;
  return true;
}

// GK_CUDA_EMULATOR_ORDER's, until SetScheduleOrder changes it. Launches are counted from the
// last change: each launch's shuffle draws from (seed, launch number), so a rerun of the same
// tests under the same seed runs the same orders.
Schedule g_schedule = [] {
  Schedule s;
  const char* e = std::getenv("GK_CUDA_EMULATOR_ORDER");
  if (!ParseSchedule(e, &s)) {
    std::fprintf(stderr, "cuda emulator: GK_CUDA_EMULATOR_ORDER=%s: expected forward, reverse or shuffle:SEED\n", e);
    std::exit(2);
  }
  return s;
}();
std::atomic<uint64_t> g_launches{0};

// 0..n-1 in the schedule's order (a block's threads, a launch's blocks); `rng` draws the
// shuffles (one stream per launch).
template <class I>
void Arrange(std::vector<I>& v, I n, std::mt19937_64& rng) {
  v.resize(size_t(n));
  std::iota(v.begin(), v.end(), I(0));
  if (g_schedule.kind == Schedule::kReverse) std::reverse(v.begin(), v.end());
  if (g_schedule.kind == Schedule::kShuffle) std::shuffle(v.begin(), v.end(), rng);
}

struct FreeAligned {
  void operator()(unsigned char* p) const { std::free(p); }
};

[[noreturn]] void FailIn(const BlockRun& b, const std::string& what) {
  std::string where = "outside a kernel";
  if (b.current >= 0) {
    const ThreadCoords& c = b.fibers[size_t(b.current)].coords;
    where = std::string(b.kernel) + ", block (" + std::to_string(c.block_idx.x) + "," + std::to_string(c.block_idx.y) +
            "," + std::to_string(c.block_idx.z) + "), thread (" + std::to_string(c.thread_idx.x) + "," +
            std::to_string(c.thread_idx.y) + "," + std::to_string(c.thread_idx.z) + ")";
  }
  std::fprintf(stderr, "cuda emulator: %s (in %s)\n", what.c_str(), where.c_str());
  std::fflush(stderr);
  std::abort();
}

BlockRun& Run() {
  if (tls_run == nullptr || tls_run->current < 0) {
    std::fprintf(stderr, "cuda emulator: a device function ran outside a kernel\n");
    std::abort();
  }
  return *tls_run;
}

Fiber& Me(BlockRun& b) { return b.fibers[size_t(b.current)]; }

void FiberMain();

// Thread j's context to switch to: made on its own stack the first time it runs as a fiber.
void* ContextOf(BlockRun& b, int j) {
  Fiber& f = b.fibers[size_t(j)];
  if (f.sp == nullptr) f.sp = (*b.stacks)[size_t(j)]->Prepare(&FiberMain);
  return f.sp;
}

// Saves the running fiber's context in *save and runs the next ready fiber in the schedule, or
// returns to the scheduler when none follows (which starts the next pass from the first): the
// scheduler's order, at one switch per hand-over instead of two.
void SwitchFrom(BlockRun& b, void** save) {
  const int n = int(b.fibers.size());
  for (int p = b.fibers[size_t(b.current)].pos + 1; p < n; ++p) {
    const int j = b.order[size_t(p)];
    Fiber& next = b.fibers[size_t(j)];
    if (next.state != Fiber::kReady) continue;
    b.current = j;
    tls_coords = &next.coords;
    gk_emu_switch(save, ContextOf(b, j));
    return;
  }
  gk_emu_switch(save, b.scheduler_sp);
}

// The other threads run until this fiber is ready again.
void Wait(BlockRun& b, Fiber& f) { SwitchFrom(b, &f.sp); }

void ReleaseBlockBarrier(BlockRun& b) {
  b.arrived = 0;
  for (Fiber& f : b.fibers) {
    if (f.state == Fiber::kWaitingBlock) f.state = Fiber::kReady;
  }
}

void ReleaseWarpBarrier(BlockRun& b, int warp) {
  Warp& w = b.warps[size_t(warp)];
  w.arrived = 0;
  w.expected = 0;
  const size_t first = size_t(warp) * 32, end = std::min(b.fibers.size(), first + 32);
  for (size_t i = first; i < end; ++i) {
    if (b.fibers[i].state == Fiber::kWaitingWarp) b.fibers[i].state = Fiber::kReady;
  }
}

// A thread's exit, which may complete a barrier the others wait at (an exited thread counts as
// arrived at __syncthreads, as on the GPU).
void Exit(BlockRun& b, Fiber& f) {
  f.state = Fiber::kDone;
  --b.live;
  Warp& w = b.warps[size_t(f.linear / 32)];
  --w.live;
  if (w.arrived > 0 && (w.mask >> (f.linear % 32) & 1u)) {
    FailIn(b, "a lane exited while others of its warp wait for it at a warp barrier or shuffle");
  }
  if (b.arrived > 0 && b.arrived == b.live) ReleaseBlockBarrier(b);
}

// The fiber's body: the kernel, then the exit.
void FiberMain() {
  BlockRun& b = *tls_run;
  b.entry(b.closure);
  Fiber& f = Me(b);
  Exit(b, f);
  SwitchFrom(b, &f.sp);
  std::abort();  // a finished fiber is never resumed
}

// A block's first pass: its threads in the schedule's order, each a plain call on this one
// stack, as long as none waits. Most kernels' threads never do (no barrier, no shuffle), and a
// call on a stack in the cache costs a fraction of a fiber each. The order is the fibers' (each
// thread runs until it waits or exits, then the next ready one), so nothing a kernel can see
// changes. A thread that waits keeps this stack as its fiber's (Wait saves its context) and
// the threads after it start as fibers of their own (ContextOf); when it exits, it hands over
// as a fiber does.
void RunThrough() {
  BlockRun& b = *tls_run;
  for (const int j : b.order) {
    b.current = j;
    tls_coords = &b.fibers[size_t(j)].coords;
    b.entry(b.closure);
    Fiber& f = Me(b);  // (b.current is j again: whoever resumed it set it)
    Exit(b, f);
    // It waited (Wait saved its context): the threads after it run as fibers, so hand over.
    if (f.sp != nullptr) {
      SwitchFrom(b, &f.sp);
      std::abort();  // a finished fiber is never resumed
    }
  }
  void* done = nullptr;
  gk_emu_switch(&done, b.scheduler_sp);
  std::abort();  // nor is a finished run-through
}

void WarpBarrier(BlockRun& b, Fiber& f, unsigned mask, const char* what) {
  const int lane = f.linear % 32, warp = f.linear / 32;
  Warp& w = b.warps[size_t(warp)];
  if (!(mask >> lane & 1u)) FailIn(b, std::string(what) + ": the calling lane is not in the mask");
  // Every lane the mask names must exist and still run, or the GPU's result is undefined (a
  // whole warp with every lane running: nothing to look up).
  const size_t first = size_t(warp) * 32;
  for (int l = 0; l < 32 && !(mask == 0xffffffffu && w.live == 32); ++l) {
    if (!(mask >> l & 1u)) continue;
    const size_t i = first + size_t(l);
    if (i >= b.fibers.size() || b.fibers[i].state == Fiber::kDone) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: mask 0x%08x names lane %d, which %s", what, mask, l,
                    i >= b.fibers.size() ? "does not exist (the block is not a whole number of warps)" : "has exited");
      FailIn(b, buf);
    }
  }
  if (w.arrived == 0) {
    w.mask = mask;
    w.expected = __builtin_popcount(mask);
  } else if (w.mask != mask) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: lanes of one warp meet with different masks (0x%08x, 0x%08x)", what, w.mask, mask);
    FailIn(b, buf);
  }
  if (++w.arrived == w.expected) {
    ReleaseWarpBarrier(b, warp);
    return;
  }
  f.state = Fiber::kWaitingWarp;
  Wait(b, f);
}

}  // namespace

bool SetScheduleOrder(const char* order) {
  if (!ParseSchedule(order, &g_schedule)) return false;
  g_launches = 0;
  return true;
}

void SyncThreads() {
  BlockRun& b = Run();
  Fiber& f = Me(b);
  if (++b.arrived == b.live) {
    ReleaseBlockBarrier(b);
    return;
  }
  f.state = Fiber::kWaitingBlock;
  Wait(b, f);
}

void SyncWarp(unsigned mask) {
  BlockRun& b = Run();
  WarpBarrier(b, Me(b), mask, "__syncwarp");
}

void WarpExchange(unsigned mask, const void* mine, int src_lane, void* out, size_t bytes) {
  BlockRun& b = Run();
  Fiber& f = Me(b);
  if (bytes > 16) FailIn(b, "a shuffle of more than 16 bytes");
  Warp& w = b.warps[size_t(f.linear / 32)];
  // A whole-warp shuffle writes the bank the one before it did not: the shuffle after next,
  // which writes this bank again, waits for every lane at the next one, so all have read this
  // one's values by then, and one barrier suffices. A shuffle of part of the warp uses the
  // current bank and waits again after reading, as the lanes outside it may still read.
  const bool whole = mask == 0xffffffffu;
  unsigned char(&slots)[32][16] = w.slots[whole ? f.whole_warp_shuffles++ & 1u : f.whole_warp_shuffles & 1u];
  std::memcpy(slots[f.linear % 32], mine, bytes);
  WarpBarrier(b, f, mask, "__shfl_*_sync");
  if (!(mask >> src_lane & 1u)) FailIn(b, "a shuffle reads a lane outside its mask");
  std::memcpy(out, slots[src_lane], bytes);
  if (!whole) WarpBarrier(b, f, mask, "__shfl_*_sync");  // every lane has read before the slots are reused
}

int LaneId() {
  BlockRun& b = Run();
  return Me(b).linear % 32;
}

void* DynamicShared() {
  BlockRun& b = Run();
  return b.smem_ptr;
}

void FreshShared(void* var, size_t bytes) {
  BlockRun& b = Run();
  if (std::find(b.fresh.begin(), b.fresh.end(), var) != b.fresh.end()) return;
  std::memset(var, 0xff, bytes);
  b.fresh.push_back(var);
}

void Fail(const char* what) {
  if (tls_run != nullptr) FailIn(*tls_run, what);
  std::fprintf(stderr, "cuda emulator: %s\n", what);
  std::abort();
}

void ExecuteKernel(const KernelCall& k) {
  BlockRun run;
  BlockRun* outer = tls_run;
  const ThreadCoords* outer_coords = tls_coords;
  tls_run = &run;
  run.kernel = k.name;
  run.entry = k.entry;
  run.closure = k.closure;
  const dim3 bd = k.block;
  const int threads = int(bd.x * bd.y * bd.z);
  run.fibers.resize(size_t(threads));
  run.warps.resize(size_t((threads + 31) / 32));
  // Stacks outlive launches: mapping them costs more than most kernels.
  static thread_local std::vector<std::unique_ptr<FiberStack>> stacks;
  while (stacks.size() < size_t(threads) + 1) {
    stacks.push_back(std::make_unique<FiberStack>(kStackBytes, stacks.size()));
  }
  run.stacks = &stacks;
  // Dynamic shared memory, 1 KiB aligned, kept for the next launches (a fresh allocation per
  // launch costs page faults).
  static thread_local std::unique_ptr<unsigned char, FreeAligned> smem;
  static thread_local size_t smem_capacity = 0;
  run.smem_bytes = (std::max<size_t>(k.smem, 16) + 1023) / 1024 * 1024;
  if (run.smem_bytes > smem_capacity) {
    smem.reset(static_cast<unsigned char*>(std::aligned_alloc(1024, run.smem_bytes)));
    smem_capacity = run.smem_bytes;
  }
  run.smem_ptr = smem.get();
  // What no block changes (the per-thread divisions cost more than a small kernel's body).
  for (int i = 0; i < threads; ++i) {
    Fiber& f = run.fibers[size_t(i)];
    f.linear = i;
    f.coords.thread_idx = uint3{unsigned(i) % bd.x, (unsigned(i) / bd.x) % bd.y, unsigned(i) / (bd.x * bd.y)};
    f.coords.block_dim = bd;
    f.coords.grid_dim = k.grid;
  }
  // The blocks in the schedule's order.
  std::mt19937_64 rng(g_schedule.seed * 0x9E3779B97F4A7C15ull + g_launches++);
  std::vector<int64_t> block_order;
  Arrange(block_order, int64_t(k.grid.x) * k.grid.y * k.grid.z, rng);
  for (const int64_t block : block_order) {
    const unsigned bx = unsigned(block % k.grid.x), by = unsigned(block / k.grid.x % k.grid.y),
                   bz = unsigned(block / (int64_t(k.grid.x) * k.grid.y));
    // Shared memory starts undefined on the GPU: NaN bytes here, so a read before any
    // write shows (the static __shared__ variables: FreshShared, as each is declared).
    std::memset(run.smem_ptr, 0xff, k.smem);
    run.fresh.clear();
    run.live = threads;
    run.arrived = 0;
    for (size_t w = 0; w < run.warps.size(); ++w) {  // (the slots need no clearing)
      Warp& warp = run.warps[w];
      warp.live = std::min(32, threads - int(w) * 32);
      warp.arrived = warp.expected = 0;
      warp.mask = 0;
    }
    if (run.order.empty() || g_schedule.kind == Schedule::kShuffle) {
      Arrange(run.order, threads, rng);
      for (int p = 0; p < threads; ++p) run.fibers[size_t(run.order[size_t(p)])].pos = p;
    }
    for (Fiber& f : run.fibers) {
      f.state = Fiber::kReady;
      f.coords.block_idx = uint3{bx, by, bz};
      f.sp = nullptr;
      f.whole_warp_shuffles = 0;
    }
    gk_emu_switch(&run.scheduler_sp, stacks[size_t(threads)]->Prepare(&RunThrough));
    run.current = -1;
    while (run.live > 0) {
      // A pass: the first ready thread, which hands over to the next ready one when it waits
      // or exits (SwitchFrom), until the last hands back here.
      int p = 0;
      while (p < threads && run.fibers[size_t(run.order[size_t(p)])].state != Fiber::kReady) ++p;
      if (p < threads) {
        const int first = run.order[size_t(p)];
        run.current = first;
        tls_coords = &run.fibers[size_t(first)].coords;
        gk_emu_switch(&run.scheduler_sp, ContextOf(run, first));
      }
      run.current = -1;
      if (p == threads) {
        int block_waiters = 0, warp_waiters = 0;
        for (const Fiber& f : run.fibers) {
          block_waiters += f.state == Fiber::kWaitingBlock;
          warp_waiters += f.state == Fiber::kWaitingWarp;
        }
        std::fprintf(stderr,
                     "cuda emulator: deadlock in %s, block (%u,%u,%u): %d threads wait at __syncthreads, %d at "
                     "a warp barrier or shuffle, and no thread can run\n",
                     k.name, bx, by, bz, block_waiters, warp_waiters);
        std::abort();
      }
    }
  }
  tls_run = outer;
  tls_coords = outer_coords;
}

}  // namespace gk_emu
