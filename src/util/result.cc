#include "util/result.h"

#include <cstdio>
#include <cstdlib>

namespace gk {

void AssertFail(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "gemmakit: internal error: %s failed at %s:%d\n", cond, file, line);
  std::abort();
}

}  // namespace gk
