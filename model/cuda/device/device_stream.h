#pragma once
// The one CUDA stream per device that every CUDA engine of the process enqueues its work on.
//
// Why one, not one per engine: once a second stream on the device has run a cuBLAS GEMM of the
// encoder's fc2 shape, the first engine's graph-replayed decoder steps take ~7% more GPU time
// for good (122 -> 131 us per step on H100, in the gaps between the graph's kernels;
// bench/history/server.md runs 11d-11g and 12). A server's decode loops (one engine each) take
// turns on one stream: a loop's host bookkeeping still overlaps the other loop's GPU step, but
// two loops' steps no longer overlap on the GPU, which is why the scheduler fills one loop
// first (SchedulingOptions::loop_fill_sentences).
//
// Consequences for an engine: it waits for its own work with an event, never with a stream
// or device synchronize (which would wait for the other engines' work too), and it captures
// its graphs on a private stream (work that other threads enqueue on a stream being captured
// would join the capture).
#include <cuda_runtime.h>

namespace nmt::cuda {

// Created on first use (on `device`), never destroyed: engines come and go, the stream stays.
cudaStream_t device_stream(int device);

}  // namespace nmt::cuda
