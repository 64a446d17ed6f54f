// The GPU's paged attention against the CPU's attention kernel (kernels/attention.h, checked
// against the PyTorch oracle) over the same cache bytes: every KV dtype, head dims 256 and 512,
// GQA, causal and sliding-window, tokens of two sequences whose block tables interleave.
// Label cuda: skipped without a GPU.
#include "kernels/cuda/paged_attention.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kernels/attention.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/cuda_test_util.h"
#include "tensor/dtype.h"

namespace gk::cuda {
namespace {

struct Shape {
  int N, K, H, window;
};

TEST(CudaPagedAttention, MatchesTheCpuKernel) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(std::random_device{}());
  const int bs = 16, blocks = 20;
  // Two sequences' tables over the same pool (read only here, so they may share blocks).
  std::vector<int32_t> tables;
  for (int b = 0; b < 10; ++b) tables.push_back((3 + 7 * b) % blocks);
  const int32_t offset1 = int32_t(tables.size());
  for (int b = 0; b < 10; ++b) tables.push_back((4 + 7 * b) % blocks);
  // New tokens: a prefill chunk of sequence 0 (positions 130..149) and decodes of both.
  std::vector<int32_t> pos, offset;
  for (int p = 130; p < 150; ++p) {
    pos.push_back(p);
    offset.push_back(0);
  }
  pos.push_back(89);
  offset.push_back(offset1);
  pos.push_back(0);
  offset.push_back(offset1);
  const int64_t T = int64_t(pos.size());
  for (const Shape& s : {Shape{8, 2, 256, 0}, Shape{4, 4, 512, 0}, Shape{8, 1, 256, 37}}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4m3, DType::kFp8E5m2}) {
      const size_t elem = DTypeSize(dt), row_bytes = size_t(s.H) * elem;
      const size_t pool_bytes = size_t(blocks * s.K * bs) * row_bytes;
      std::vector<std::byte> kp(pool_bytes), vp(pool_bytes);
      const auto kf = Random(size_t(blocks * s.K * bs * s.H), rng), vf = Random(size_t(blocks * s.K * bs * s.H), rng);
      ConvertFromF32(dt, kf.data(), int64_t(kf.size()), kp.data());
      ConvertFromF32(dt, vf.data(), int64_t(vf.size()), vp.data());
      const auto q = Random(size_t(T * s.N * s.H), rng);
      // The CPU's answer: each (token, head) over a contiguous copy of its visible rows.
      std::vector<float> want(q.size());
      for (int64_t t = 0; t < T; ++t) {
        const int32_t p = pos[size_t(t)], lo = s.window > 0 ? std::max(0, p - s.window + 1) : 0;
        for (int h = 0; h < s.N; ++h) {
          const int kh = h / (s.N / s.K);
          std::vector<std::byte> kr(size_t(p - lo + 1) * row_bytes), vr(kr.size());
          for (int32_t j = lo; j <= p; ++j) {
            const int32_t block = tables[size_t(offset[size_t(t)] + j / bs)];
            const size_t src = size_t((block * s.K + kh) * bs + j % bs) * row_bytes;
            std::memcpy(kr.data() + size_t(j - lo) * row_bytes, kp.data() + src, row_bytes);
            std::memcpy(vr.data() + size_t(j - lo) * row_bytes, vp.data() + src, row_bytes);
          }
          const KvSegment seg{kr.data(), vr.data(), p - lo + 1, s.H};
          const AttentionQuery aq{q.data() + (t * s.N + h) * s.H, s.H, 1, s.H, 0.0625f, dt};
          AttendHeads(aq, {&seg, 1}, want.data() + (t * s.N + h) * s.H, s.H);
        }
      }
      auto dq = DeviceBuffer<float>::From(q);
      auto dout = DeviceBuffer<float>::From(Poison(q.size()));
      auto dk = DeviceBuffer<std::byte>::From(kp);
      auto dv = DeviceBuffer<std::byte>::From(vp);
      auto dpos = DeviceBuffer<int32_t>::From(pos);
      auto doff = DeviceBuffer<int32_t>::From(offset);
      auto dtab = DeviceBuffer<int32_t>::From(tables);
      ASSERT_TRUE(dq.ok() && dout.ok() && dk.ok() && dv.ok() && dpos.ok() && doff.ok() && dtab.ok());
      PagedAttentionArgs a;
      a.q = dq->data();
      a.out = dout->data();
      a.T = T;
      a.num_heads = s.N;
      a.kv_heads = s.K;
      a.head_dim = s.H;
      a.scale = 0.0625f;
      a.window = s.window;
      a.tokens = {dpos->data(), doff->data(), dtab->data()};
      a.block_size = bs;
      a.k_pool = dk->data();
      a.v_pool = dv->data();
      a.dtype = dt;
      const Status st = PagedAttention(a, 0);
      ASSERT_TRUE(st.ok()) << st.message();
      auto got = dout->ToHost();
      ASSERT_TRUE(got.ok()) << got.message();
      EXPECT_LT(RelErr(*got, want), 1e-5) << DTypeName(dt) << " N=" << s.N << " K=" << s.K << " H=" << s.H
                                          << " window=" << s.window;
    }
  }
}

}  // namespace
}  // namespace gk::cuda
