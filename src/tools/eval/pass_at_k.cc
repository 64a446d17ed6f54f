#include "tools/eval/pass_at_k.h"

#include <limits>

namespace gk::eval {

double PassAtK(int n, int c, int k) {
  // Outside the estimator's domain there is no meaningful value; NaN makes a caller's bug visible
  // instead of passing for a score (the reference's formula gives 1 for k > n when c == 0).
  if (n < 1 || c < 0 || c > n || k < 1 || k > n) return std::numeric_limits<double>::quiet_NaN();
  if (n - c < k) return 1.0;  // every k-subset holds a passing sample
  // C(n-c, k) / C(n, k) as a product of c factors: no large binomials, no overflow.
  double fail_all = 1.0;
  for (int i = n - c + 1; i <= n; ++i) fail_all *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - fail_all;
}

}  // namespace gk::eval
