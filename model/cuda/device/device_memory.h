#pragma once
// Device memory of the CUDA engine: a caching allocator (no cudaMalloc/cudaFree in the decode
// loop once buffers are warm) that honors TranslatorOptions::device_memory_limit, and the
// error checks that turn CUDA/cuBLAS failures into nmt::Error.
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace nmt::cuda {

// Throws nmt::Error: kResourceExhausted for out-of-memory, kInternal otherwise.
void check_cuda(cudaError_t status, const char* what);
void check_cublas(int status, const char* what);

class DeviceAllocator {
 public:
  // limit_bytes = 0: no cap beyond what the device has.
  explicit DeviceAllocator(size_t limit_bytes) : limit_(limit_bytes) {}
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // Returns a block of at least `bytes` (256-byte aligned), from the cache when one of the
  // same size class is free. Throws nmt::Error(kResourceExhausted) past the limit or when the
  // device is out of memory (after giving the cached blocks back once).
  void* allocate(size_t bytes);
  // Returns the block to the cache; work already enqueued on the device's stream
  // (device_stream.h) may still use it, which is safe because every later user is ordered
  // after it on that stream.
  void release(void* ptr);
  // Frees the cached (unused) blocks.
  void trim();
  // Memory obtained elsewhere (DevicePool's granules) counted against the limit: false (or,
  // when `required`, nmt::Error(kResourceExhausted)) where it would pass the limit even after
  // trim(); uncharge() when it is given back.
  bool charge(size_t bytes, bool required);
  void uncharge(size_t bytes) { held_ -= bytes; }
  size_t held() const { return held_; }  // bytes obtained from cudaMalloc or charged, not given back

 private:
  static size_t size_class(size_t bytes);
  size_t limit_;
  size_t held_ = 0;
  std::unordered_map<void*, size_t> in_use_;    // block -> its class size
  std::map<size_t, std::vector<void*>> free_;   // class size -> cached blocks
};

// An owning handle of `count` elements of T from a DeviceAllocator.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator* alloc, size_t count)
      : alloc_(alloc), count_(count),
        ptr_(count ? static_cast<T*>(alloc->allocate(count * sizeof(T))) : nullptr) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = o.alloc_; ptr_ = o.ptr_; count_ = o.count_;
      o.ptr_ = nullptr; o.count_ = 0;
    }
    return *this;
  }
  void reset() {
    if (ptr_) alloc_->release(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  DeviceAllocator* alloc_ = nullptr;
  size_t count_ = 0;
  T* ptr_ = nullptr;
};

// Page-locked host memory for the per-step uploads and downloads.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  void reserve(size_t bytes);  // grows only; contents are not kept
  void* get() const { return ptr_; }
  size_t capacity() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace nmt::cuda
