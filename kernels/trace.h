#pragma once
// The CUDA kernels' launch timeline (kernels/cuda/trace.cuh): recorded only in builds
// configured with -DNMT_CUDA_TRACE=ON, read once the work has finished.
#include <string>

namespace nmt::kernels {

// True when this build records the timeline.
bool trace_recorded();

// Writes every kept record as CSV (source, line, blocks, wait_ns, release_ns), sorted by
// release time. Throws std::runtime_error when this build records nothing or the file cannot be
// written.
void trace_dump(const std::string& path);

}  // namespace nmt::kernels
