// The oneDNN bf16 matmul ceiling (ceilings.h): the rate a tuned library reaches on a prefill's
// product with bf16 inputs and f32 results, the speed issue's "measured bf16 matmul rate".
// oneDNN (Debian libdnnl, OpenMP runtime) runs on its own OpenMP threads, set to `threads`;
// the weights are reordered once into the layout it prefers, outside the timing.
#include <dnnl.hpp>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "tools/bench/ceilings.h"
#include "tensor/dtype.h"
#include "util/clock.h"

namespace gk {

double MeasureOnednnBf16Rate(int threads, int repeats) {
  // Without AVX-512 BF16 oneDNN 2.6 emulates or falls back to reference loops: not a ceiling.
  // Like the bf16 dot peak, none either when a lower ISA is forced (GEMMAKIT_ISA).
  if (!CpuHasAvx512Bf16() || ActiveIsa() != Isa::kAvx512) return 0;
  constexpr int64_t M = 512, N = 2048, K = 2048;
  using dnnl::memory;
  try {
    omp_set_num_threads(threads);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    const memory::desc src_md({M, K}, memory::data_type::bf16, memory::format_tag::ab);
    const memory::desc any_md({K, N}, memory::data_type::bf16, memory::format_tag::any);
    const memory::desc plain_md({K, N}, memory::data_type::bf16, memory::format_tag::ba);  // W rows = outputs
    const memory::desc dst_md({M, N}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, any_md, dst_md), eng);
    if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0) return 0;  // no optimised kernel here
    std::vector<uint16_t> a(size_t(M * K), F32ToBf16(0.5f)), w_plain(size_t(N * K), F32ToBf16(0.25f));
    std::vector<uint8_t> w(pd.weights_desc().get_size());
    std::vector<float> out(size_t(M * N));
    memory src(src_md, eng, a.data()), wp(plain_md, eng, w_plain.data()), wb(pd.weights_desc(), eng, w.data()),
        dst(dst_md, eng, out.data());
    dnnl::reorder(wp, wb).execute(stream, wp, wb);
    const dnnl::matmul mm(pd);
    std::vector<double> rates;
    for (int r = 0; r < repeats + 1; ++r) {
      const double t0 = NowSeconds();
      mm.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DST, dst}});
      stream.wait();
      if (r > 0) rates.push_back(2.0 * double(M * N * K) / (NowSeconds() - t0) / 1e9);  // the first JITs
    }
    return Median(rates);
  } catch (const dnnl::error&) {
    return 0;
  }
}

}  // namespace gk
