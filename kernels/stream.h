#pragma once
// The one place that decides whether CUDA types are visible: CPU-only builds compile every
// kernels/ header without the CUDA toolkit.
#ifndef NMT_WITH_CUDA
#define NMT_WITH_CUDA 0
#endif
#if NMT_WITH_CUDA
#include <cuda_runtime.h>
#endif

// Marks small inline helpers shared by the CPU references and the CUDA kernels.
#if defined(__CUDACC__)
#define NMT_HOST_DEVICE __host__ __device__
#else
#define NMT_HOST_DEVICE
#endif
