#pragma once
// A device buffer whose memory follows use without moving: a virtual address range reserved
// once for the most it may hold, backed from its start by physical memory (CUDA virtual
// memory management: cuMemCreate/cuMemMap, in granules of 2 MiB on current GPUs) as it grows,
// and given back from its end as it shrinks. Its address never changes, so the captured
// graphs that point into it stay valid (docs/data-flow.md, "Decode-state memory"). The bytes
// backed count against the DeviceAllocator's limit and in its held().
#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "model/cuda/device/device_memory.h"

namespace nmt::cuda {

class DevicePool {
 public:
  using Clock = std::chrono::steady_clock;
  DevicePool() = default;
  // Reserves addresses for up to max_bytes (> 0) on `device`; nothing backed yet.
  DevicePool(DeviceAllocator* alloc, int device, size_t max_bytes);
  ~DevicePool() { reset(); }
  DevicePool(DevicePool&& o) noexcept { *this = std::move(o); }
  DevicePool& operator=(DevicePool&& o) noexcept;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  char* get() const { return reinterpret_cast<char*>(base_); }
  size_t reserved() const { return reserved_; }
  size_t backed() const { return backed_; }
  // Backs at least [0, bytes), and a quarter of what it backs ahead where the limit allows (a
  // steady growth maps a few times, not granule by granule), in pieces of at most a sixteenth
  // of the new total. Throws nmt::Error(kResourceExhausted) past the limit or when the device
  // is out of memory (backing what it backed before, no more), kInternal past the reservation.
  void grow(size_t bytes);
  // Gives back the pieces that lie wholly past `bytes`. Nothing enqueued on the device may
  // still use them: unmapping does not wait for the device.
  void shrink(size_t bytes);
  // shrink(bytes) once the pool has backed more than excess(bytes) past `bytes` for `retain`
  // (as of `now`, by the calls that saw it so): a load that drains and comes back within
  // `retain` (batches one after another) finds its memory still there.
  void trim(size_t bytes, Clock::time_point now, Clock::duration retain);
  // The margin trim() leaves: two granules and an eighth of what it backs.
  size_t excess(size_t bytes) const { return bytes + 2 * granule_ + backed_ / 8; }

 private:
  struct Piece {
    CUmemGenericAllocationHandle handle;
    size_t bytes;
  };
  static constexpr size_t kPieces = 16;
  CUresult map_piece(size_t bytes);
  void reset() noexcept;
  DeviceAllocator* alloc_ = nullptr;
  int device_ = 0;
  CUdeviceptr base_ = 0;
  size_t reserved_ = 0, granule_ = 0, backed_ = 0;
  std::vector<Piece> pieces_;  // backing [0, backed_) in order
  bool over_ = false;          // trim() saw more than excess() since over_since_
  Clock::time_point over_since_;
};

}  // namespace nmt::cuda
