// The GPU's attention kernels against the CPU's attention kernel (kernels/attention.h, checked
// against the PyTorch oracle) over the same cache bytes: every KV dtype, head dims 256 and 512,
// GQA, causal and sliding-window, tokens of two sequences whose block tables interleave.
// paged_attention.h takes every token; then attention_prefill.h (or flash_attention.h) takes
// the one sequence's chunk and paged_attention.h the decode rows beside it. Label cuda: skipped without a GPU.
#include "kernels/cuda/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/flash_attention.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

struct Shape {
  int N, K, H, window;
};

constexpr int kBlockSize = 16, kBlocks = 20;
constexpr float kScale = 0.0625f;

template <class T>
DeviceBuffer<T> Up(const std::vector<T>& host) {
  auto b = DeviceBuffer<T>::From(host);
  EXPECT_TRUE(b.ok()) << b.message();
  return b.ok() ? std::move(*b) : DeviceBuffer<T>();
}

// Random cache bytes and queries, the CPU's answer, and the device copies.
struct AttentionCase {
  Shape s;
  DType dt;
  std::vector<int32_t> tables, pos, offset;  // two sequences' tables; per token its position and table
  int64_t T = 0;
  std::vector<float> q, want;
  DeviceBuffer<float> dq, dout;
  DeviceBuffer<std::byte> dk, dv;
  DeviceBuffer<int32_t> dpos, doff, dtab;

  // Sequence 0's prefill chunk: positions [chunk_first, chunk_first + chunk_len), at most 160.
  AttentionCase(Shape shape, DType dtype, std::mt19937& rng, int chunk_first = 130, int chunk_len = 20)
      : s(shape), dt(dtype) {
    for (int b = 0; b < 10; ++b) tables.push_back((3 + 7 * b) % kBlocks);  // shared blocks are fine: read only
    for (int b = 0; b < 10; ++b) tables.push_back((4 + 7 * b) % kBlocks);
    for (int p = chunk_first; p < chunk_first + chunk_len; ++p) {  // a prefill chunk of sequence 0, then decodes of sequence 1
      pos.push_back(p);
      offset.push_back(0);
    }
    for (int p : {89, 0}) {
      pos.push_back(p);
      offset.push_back(10);
    }
    T = int64_t(pos.size());
    const size_t elem = DTypeSize(dt), row_bytes = size_t(s.H) * elem;
    const size_t pool_bytes = size_t(kBlocks * s.K * kBlockSize) * row_bytes;
    std::vector<std::byte> kp(pool_bytes), vp(pool_bytes);
    const auto kf = Random(size_t(kBlocks * s.K * kBlockSize * s.H), rng), vf = Random(kf.size(), rng);
    ConvertFromF32(dt, kf.data(), int64_t(kf.size()), kp.data());
    ConvertFromF32(dt, vf.data(), int64_t(vf.size()), vp.data());
    q = Random(size_t(T * s.N * s.H), rng);
    want.resize(q.size());
    for (int64_t t = 0; t < T; ++t) {  // each (token, head) over a contiguous copy of its visible rows
      const int32_t p = pos[size_t(t)], lo = s.window > 0 ? std::max(0, p - s.window + 1) : 0;
      for (int h = 0; h < s.N; ++h) {
        const int kh = h / (s.N / s.K);
        std::vector<std::byte> kr(size_t(p - lo + 1) * row_bytes), vr(kr.size());
        for (int32_t j = lo; j <= p; ++j) {
          const int32_t block = tables[size_t(offset[size_t(t)] + j / kBlockSize)];
          const size_t src = size_t((block * s.K + kh) * kBlockSize + j % kBlockSize) * row_bytes;
          std::memcpy(kr.data() + size_t(j - lo) * row_bytes, kp.data() + src, row_bytes);
          std::memcpy(vr.data() + size_t(j - lo) * row_bytes, vp.data() + src, row_bytes);
        }
        const KvSegment seg{kr.data(), vr.data(), p - lo + 1, s.H};
        const AttentionQuery aq{q.data() + (t * s.N + h) * s.H, s.H, 1, s.H, kScale, dt};
        AttendHeads(aq, {&seg, 1}, want.data() + (t * s.N + h) * s.H, s.H);
      }
    }
    dq = Up(q);
    dout = Up(Poison(q.size()));
    dk = Up(kp);
    dv = Up(vp);
    dpos = Up(pos);
    doff = Up(offset);
    dtab = Up(tables);
  }

  PagedAttentionArgs Args() {
    PagedAttentionArgs a;
    a.q = dq.data();
    a.out = dout.data();
    a.T = T;
    a.num_heads = s.N;
    a.kv_heads = s.K;
    a.head_dim = s.H;
    a.scale = kScale;
    a.window = s.window;
    a.tokens = {dpos.data(), doff.data(), dtab.data()};
    a.block_size = kBlockSize;
    a.k_pool = dk.data();
    a.v_pool = dv.data();
    a.dtype = dt;
    return a;
  }
  // Sequence 0's chunk of n positions from `first` (rows 0 .. n) for the prefill routes.
  PrefillAttentionArgs Prefill(int first, int n) {
    PrefillAttentionArgs p;
    p.q = dq.data();
    p.out = dout.data();
    p.t0 = 0;
    p.T = n;
    p.first = first;
    p.table = dtab.data();
    p.num_heads = s.N;
    p.kv_heads = s.K;
    p.head_dim = s.H;
    p.scale = kScale;
    p.window = s.window;
    p.block_size = kBlockSize;
    p.k_pool = dk.data();
    p.v_pool = dv.data();
    p.dtype = dt;
    return p;
  }
  // The two decode rows after the chunk's n through the paged kernel; then every row against the CPU.
  void DecodeRowsAndCheck(int n, cudaStream_t stream, double tolerance) {
    auto rows = DeviceBuffer<int32_t>::From({n, n + 1});
    ASSERT_TRUE(rows.ok());
    PagedAttentionArgs a = Args();
    a.T = 2;
    a.rows = rows->data();
    const Status st = PagedAttention(a, stream);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    auto got = dout.ToHost();
    ASSERT_TRUE(got.ok()) << got.message();
    EXPECT_LT(RelErr(*got, want), tolerance) << Name();
  }
  std::string Name() const {
    return StrCat(DTypeName(dt), " N=", s.N, " K=", s.K, " H=", s.H, " window=", s.window);
  }
};

// Groups of 4, 1, 8, 2 (the 31B shape's sliding layers: two warps per head), 3 (one warp idle)
// and 8 heads at 512 (its full layers); a head dim of 40, whose bf16 and fp8 rows are not whole
// 16-byte chunks (staged element by element).
const Shape kShapes[] = {{8, 2, 256, 0}, {4, 4, 512, 0}, {8, 1, 256, 37}, {4, 2, 256, 0},
                         {6, 2, 256, 21}, {8, 1, 512, 0}, {4, 1, 40, 0}};
const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4m3, DType::kFp8E5m2};

// The outputs' bf16 copy for o_proj (out_staged) is each output rounded to bf16.
void ExpectBf16Copy(const DeviceBuffer<uint16_t>& hi, const std::vector<float>& out, const std::string& what) {
  const auto h = *hi.ToHost();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(h[i], F32ToBf16(out[i])) << what << " " << i;
}

// Whole, and with each token's positions cut into 3 and 7 ranges merged after (the splits of a
// decode step: some ranges are empty for the short sequence); with a bf16 cache, the outputs'
// bf16 copy too.
TEST(CudaPagedAttention, MatchesTheCpuKernel) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  for (const Shape& s : kShapes) {
    for (DType dt : kDtypes) {
      for (int splits : {1, 3, 7}) {
        AttentionCase c(s, dt, rng);
        PagedAttentionArgs a = c.Args();
        a.splits = splits;
        auto ws = DeviceBuffer<float>::Allocate(size_t(std::max<int64_t>(1, PagedAttentionWorkspaceFloats(a))));
        ASSERT_TRUE(ws.ok());
        a.workspace = ws->data();
        auto staged = DeviceBuffer<uint16_t>::From(std::vector<uint16_t>(c.want.size(), 0xffff));
        ASSERT_TRUE(staged.ok());
        if (dt == DType::kBF16) a.out_staged.hi = staged->data();  // (one dtype: the copy is the kernels' last step)
        const Status st = PagedAttention(a, 0);
        ASSERT_TRUE(st.ok()) << st.message();
        auto got = c.dout.ToHost();
        ASSERT_TRUE(got.ok()) << got.message();
        EXPECT_LT(RelErr(*got, c.want), 1e-5) << c.Name() << " splits=" << splits;
        if (dt == DType::kBF16) ExpectBf16Copy(*staged, *got, StrCat(c.Name(), " splits=", splits));
      }
    }
  }
}

// A group of 32 query heads per KV head (past the grouped kernel's 16): the per-head kernel, and
// its bf16 copy of the outputs.
TEST(CudaPagedAttention, WideGroupsTakeThePerHeadKernel) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  AttentionCase c(Shape{32, 1, 256, 0}, DType::kF16, rng);
  PagedAttentionArgs a = c.Args();
  auto staged = DeviceBuffer<uint16_t>::From(std::vector<uint16_t>(c.want.size(), 0xffff));
  ASSERT_TRUE(staged.ok());
  a.out_staged.hi = staged->data();
  const Status st = PagedAttention(a, 0);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto got = *c.dout.ToHost();
  EXPECT_LT(RelErr(got, c.want), 1e-5) << c.Name();
  ExpectBf16Copy(*staged, got, c.Name());
}

TEST(CudaPagedAttention, ChoosesSplitsForSmallBatches) {
  EXPECT_EQ(PagedAttentionSplits(64, 16, 4096, 132), 1);  // 1,024 blocks already
  EXPECT_EQ(PagedAttentionSplits(1, 4, 100, 132), 1);     // too short to split
  EXPECT_EQ(PagedAttentionSplits(1, 4, 4096, 132), 32);   // 264 blocks wanted, 128 positions each at least
  EXPECT_EQ(PagedAttentionSplits(1, 1, 1 << 20, 132), 64);
}

// The chunk through products (operands in the cache's precision: f32, f16, or bf16), the two
// decode rows through the paged kernel; together they write every row.
TEST(CudaPrefillAttention, ChunkThroughProductsBesideDecodeRows) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  GemmOnStream g;
  const Status made = g.Create();
  ASSERT_TRUE(made.ok()) << made.message();
  cudaStream_t stream = g.stream;
  GemmRunner* gemm = g.gemm.get();
  PrefillAttention prefill;
  for (const Shape& s : kShapes) {
    for (DType dt : kDtypes) {
      // 20 rows over 150 positions; 21 over 151: odd rows and context, so that without the
      // score rows' padding the second KV head's matrices would start misaligned.
      for (int n : {20, 21}) {
        AttentionCase c(s, dt, rng, 130, n);
        const Status st = prefill.Run(c.Prefill(130, n), *gemm, stream);
        ASSERT_TRUE(st.ok()) << st.message();
        c.DecodeRowsAndCheck(n, stream, dt == DType::kF32 ? 1e-5 : dt == DType::kBF16 ? 1e-2 : 2e-3);
      }
    }
  }
}

// The fused kernel on a chunk of 65 positions (three blocks of query rows, the last with one
// row; the first starts mid-tile of positions), beside the decode rows; head dims 32 to 512.
TEST(CudaPrefillAttention, FusedKernelBesideDecodeRows) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const Shape shapes[] = {{8, 2, 256, 0}, {4, 4, 512, 0}, {8, 1, 256, 37}, {6, 3, 32, 0}, {4, 2, 64, 40}};
  for (const Shape& s : shapes) {
    for (DType dt : {DType::kF16, DType::kBF16, DType::kFp8E4m3, DType::kFp8E5m2}) {
      ASSERT_TRUE(FlashPrefillSupports(dt, s.H));
      const int first = 95, n = 65;
      AttentionCase c(s, dt, rng, first, n);
      const Status st = FlashPrefillAttention(c.Prefill(first, n), stream);
      ASSERT_TRUE(st.ok()) << st.message();
      c.DecodeRowsAndCheck(n, stream, dt == DType::kBF16 ? 1e-2 : 2e-3);
    }
  }
  EXPECT_FALSE(FlashPrefillSupports(DType::kF32, 256));
  EXPECT_FALSE(FlashPrefillSupports(DType::kBF16, 520));
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace gk::cuda
