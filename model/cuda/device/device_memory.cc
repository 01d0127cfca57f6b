#include "model/cuda/device/device_memory.h"

#include <cublas_api.h>

#include <string>

#include "model/cuda/device/capture_gate.h"
#include "model/error.h"

namespace nmt::cuda {

namespace {
std::string mib(size_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }
}  // namespace

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error state
  const std::string msg = std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation)
    throw Error(ErrorCode::kResourceExhausted, msg + " (out of GPU memory)");
  throw Error(ErrorCode::kInternal, msg);
}

void check_cublas(int status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string msg = std::string("cuBLAS error ") + std::to_string(status) + " in " + what;
  if (status == CUBLAS_STATUS_ALLOC_FAILED)
    throw Error(ErrorCode::kResourceExhausted, msg + " (out of GPU memory)");
  throw Error(ErrorCode::kInternal, msg);
}

DeviceAllocator::~DeviceAllocator() {
  trim();
  const DeviceWideScope scope;  // capture_gate.h
  for (auto& [ptr, size] : in_use_) cudaFree(ptr);
}

size_t DeviceAllocator::size_class(size_t bytes) {
  // 256-byte granules below 64 KiB, then quarter steps between powers of two (<= 25% waste).
  if (bytes <= (64u << 10)) return (bytes + 255) & ~size_t(255);
  size_t p = 1;
  while (p * 2 <= bytes) p *= 2;
  const size_t quarter = p / 4;
  return (bytes + quarter - 1) / quarter * quarter;
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes ? bytes : 1);
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    void* ptr = it->second.back();
    it->second.pop_back();
    in_use_[ptr] = size;
    return ptr;
  }
  if (limit_ && held_ + size > limit_) trim();
  if (limit_ && held_ + size > limit_) {
    throw Error(ErrorCode::kResourceExhausted,
                "GPU memory limit of " + mib(limit_) + " reached: the CUDA engine holds " +
                    mib(held_) + " and needs " + mib(size) + " more");
  }
  void* ptr = nullptr;
  auto device_malloc = [&] {
    const DeviceWideScope scope;  // capture_gate.h
    return cudaMalloc(&ptr, size);
  };
  cudaError_t status = device_malloc();
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    trim();
    status = device_malloc();
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error(status == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted
                                                    : ErrorCode::kInternal,
                std::string("out of GPU memory: cudaMalloc of ") + mib(size) + " failed (" +
                    cudaGetErrorString(status) + "); the CUDA engine holds " + mib(held_));
  }
  held_ += size;
  in_use_[ptr] = size;
  return ptr;
}

bool DeviceAllocator::charge(size_t bytes, bool required) {
  if (limit_ && held_ + bytes > limit_) trim();
  if (limit_ && held_ + bytes > limit_) {
    if (!required) return false;
    throw Error(ErrorCode::kResourceExhausted, "GPU memory limit of " + mib(limit_) + " reached: the CUDA engine holds " +
                                                   mib(held_) + " and needs " + mib(bytes) + " more");
  }
  held_ += bytes;
  return true;
}

void DeviceAllocator::release(void* ptr) {
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) return;
  free_[it->second].push_back(ptr);
  in_use_.erase(it);
}

void DeviceAllocator::trim() {
  bool any = false;
  for (auto& [size, blocks] : free_) any = any || !blocks.empty();
  if (!any) return;
  const DeviceWideScope scope;  // capture_gate.h
  cudaDeviceSynchronize();  // cached blocks may still be read by enqueued work
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      cudaFree(p);
      held_ -= size;
    }
    blocks.clear();
  }
}

PinnedBuffer::~PinnedBuffer() {
  const DeviceWideScope scope;  // capture_gate.h
  if (ptr_) cudaFreeHost(ptr_);
}

void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  const DeviceWideScope scope;  // capture_gate.h
  if (ptr_) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  check_cuda(cudaMallocHost(&ptr_, bytes), "cudaMallocHost");
  bytes_ = bytes;
}

}  // namespace nmt::cuda
