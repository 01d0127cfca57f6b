// Merges the translation units' launch records (trace.cuh) into one CSV timeline.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/trace.cuh"
#include "kernels/trace.h"

namespace nmt::kernels {

bool trace_recorded() { return NMT_CUDA_TRACE != 0; }

void trace_dump(const std::string& path) {
  if (!trace_recorded()) throw std::runtime_error("this build records no launch timeline (configure with -DNMT_CUDA_TRACE=ON)");
  struct Row {
    const char* file;
    cuda::TraceRecord r;
  };
  // The records of work still in flight, on any stream.
  cuda::check(cudaDeviceSynchronize(), "reading the launch timeline");
  std::vector<Row> rows;
  for (const auto& source : cuda::trace_sources()) {
    std::vector<cuda::TraceRecord> records;
    cuda::check(source.read(records), "reading the launch timeline");
    for (const auto& r : records) rows.push_back({source.file, r});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.r.release < b.r.release; });
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) throw std::runtime_error("cannot write the launch timeline to " + path);
  std::fprintf(f.get(), "source,line,blocks,wait_ns,release_ns\n");
  for (const auto& row : rows) {
    const char* base = std::strrchr(row.file, '/');
    std::fprintf(f.get(), "%s,%u,%u,%llu,%llu\n", base ? base + 1 : row.file, row.r.line, row.r.blocks,
                 static_cast<unsigned long long>(row.r.wait), static_cast<unsigned long long>(row.r.release));
  }
}

}  // namespace nmt::kernels
