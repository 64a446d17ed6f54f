// The unbiased pass@k estimator (Chen et al. 2021, human-eval): for n samples of which c pass,
// pass@k = 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1..n} (1 - k/i); 1 when
// n - c < k. Defined for 1 <= k <= n and 0 <= c <= n; NaN outside (a caller's bug, never a score).
#pragma once

namespace gk::eval {

double PassAtK(int n, int c, int k);

}  // namespace gk::eval
