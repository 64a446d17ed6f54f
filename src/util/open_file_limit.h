// Raises this process's soft limit on open files to its hard limit. A benchmark at 1,000
// concurrent streams needs more than the usual soft default of 1,024 descriptors (vLLM's
// benchmark and server raise it the same way).
#pragma once

namespace gk {

// Returns the soft limit in force afterwards.
long RaiseOpenFileLimit();

}  // namespace gk
