#include "model/cuda/device/device_pool.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "model/cuda/device/capture_gate.h"
#include "model/error.h"

namespace nmt::cuda {
namespace {

// The driver's virtual memory management, reached through the runtime (cudaGetDriverEntryPoint):
// linking libcuda would make every binary fail to start on a machine without the driver,
// where the GPU tests must skip instead.
struct Driver {
  decltype(&::cuGetErrorName) error_name = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
};

template <typename F>
void entry(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    throw Error(ErrorCode::kInternal, std::string("CUDA driver entry point ") + name + " not found");
  }
  *fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    entry("cuGetErrorName", &x.error_name);
    entry("cuMemGetAllocationGranularity", &x.granularity);
    entry("cuMemAddressReserve", &x.reserve);
    entry("cuMemAddressFree", &x.free);
    entry("cuMemCreate", &x.create);
    entry("cuMemRelease", &x.release);
    entry("cuMemMap", &x.map);
    entry("cuMemUnmap", &x.unmap);
    entry("cuMemSetAccess", &x.set_access);
    return x;
  }();
  return d;
}

void check_cu(CUresult status, const char* what) {
  if (status == CUDA_SUCCESS) return;
  const char* name = nullptr;
  driver().error_name(status, &name);
  const std::string msg = std::string("CUDA driver error in ") + what + ": " + (name ? name : "unknown");
  if (status == CUDA_ERROR_OUT_OF_MEMORY) throw Error(ErrorCode::kResourceExhausted, msg + " (out of GPU memory)");
  throw Error(ErrorCode::kInternal, msg);
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp p = {};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

}  // namespace

DevicePool::DevicePool(DeviceAllocator* alloc, int device, size_t max_bytes) : alloc_(alloc), device_(device) {
  const CUmemAllocationProp p = device_memory(device);
  check_cu(driver().granularity(&granule_, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "memory granularity");
  reserved_ = (std::max<size_t>(max_bytes, 1) + granule_ - 1) / granule_ * granule_;
  check_cu(driver().reserve(&base_, reserved_, 0, 0, 0), "address reservation");
}

DevicePool& DevicePool::operator=(DevicePool&& o) noexcept {
  if (this != &o) {
    reset();
    alloc_ = o.alloc_;
    device_ = o.device_;
    base_ = o.base_;
    reserved_ = o.reserved_;
    granule_ = o.granule_;
    backed_ = o.backed_;
    pieces_ = std::move(o.pieces_);
    over_ = o.over_;
    over_since_ = o.over_since_;
    o.base_ = 0;
    o.reserved_ = o.backed_ = 0;
    o.pieces_.clear();
  }
  return *this;
}

void DevicePool::grow(size_t bytes) {
  if (bytes <= backed_) return;
  if (bytes > reserved_)
    throw Error(ErrorCode::kInternal, "device pool: " + std::to_string(bytes) + " bytes asked of a pool of " +
                                          std::to_string(reserved_));
  auto round = [&](size_t b) { return (b + granule_ - 1) / granule_ * granule_; };
  const size_t need = round(bytes - backed_);
  // The quarter ahead is a wish: the limit and the device stop only what was asked.
  size_t size = std::max(need, std::min(round(backed_ / 4), reserved_ - backed_));
  if (size > need && !alloc_->charge(size, false)) size = need;
  if (size == need) alloc_->charge(size, true);
  // In pieces of at most a sixteenth of what it will back: shrink() gives back whole pieces
  // only, so one piece as large as a burst (a queue admitted at once) would keep its size
  // backed for the pool's life.
  const size_t before = backed_, most = std::max(granule_, round((backed_ + size) / kPieces));
  size_t left = size;
  while (left > 0) {
    const size_t piece = std::min(left, most);
    const CUresult status = map_piece(piece);
    if (status != CUDA_SUCCESS) {
      alloc_->uncharge(left);
      if (status == CUDA_ERROR_OUT_OF_MEMORY && backed_ - before >= need) return;  // the wish is cut short
      shrink(before);
      check_cu(status, "device pool growth");
    }
    left -= piece;
  }
}

// Backs the next `bytes` past backed_ with one allocation of its own; on failure nothing is
// left mapped or held.
CUresult DevicePool::map_piece(size_t bytes) {
  const CUmemAllocationProp p = device_memory(device_);
  const CUdeviceptr at = base_ + backed_;
  const DeviceWideScope scope;  // capture_gate.h
  CUmemGenericAllocationHandle h = 0;
  CUresult status = driver().create(&h, bytes, &p, 0);
  if (status != CUDA_SUCCESS) return status;
  status = driver().map(at, bytes, 0, h, 0);
  if (status != CUDA_SUCCESS) {
    driver().release(h);
    return status;
  }
  CUmemAccessDesc access = {};
  access.location = p.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  status = driver().set_access(at, bytes, &access, 1);
  if (status != CUDA_SUCCESS) {
    driver().unmap(at, bytes);
    driver().release(h);
    return status;
  }
  pieces_.push_back({h, bytes});
  backed_ += bytes;
  return CUDA_SUCCESS;
}

void DevicePool::shrink(size_t bytes) {
  while (!pieces_.empty() && backed_ - pieces_.back().bytes >= bytes) {
    const Piece piece = pieces_.back();
    pieces_.pop_back();
    backed_ -= piece.bytes;
    {
      const DeviceWideScope scope;  // capture_gate.h
      driver().unmap(base_ + backed_, piece.bytes);
      driver().release(piece.handle);
    }
    alloc_->uncharge(piece.bytes);
  }
}

void DevicePool::trim(size_t bytes, Clock::time_point now, Clock::duration retain) {
  if (backed_ <= excess(bytes)) {
    over_ = false;
    return;
  }
  if (!over_) {
    over_ = true;
    over_since_ = now;
  }
  if (now - over_since_ < retain) return;
  shrink(bytes);
  over_ = false;
}

void DevicePool::reset() noexcept {
  if (!base_) return;
  shrink(0);
  const DeviceWideScope scope;  // capture_gate.h
  driver().free(base_, reserved_);
  base_ = 0;
  reserved_ = 0;
}

}  // namespace nmt::cuda
