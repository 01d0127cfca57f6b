#include "model/cuda/device/device_stream.h"

#include <mutex>
#include <vector>

#include "model/cuda/device/device_memory.h"
#include "model/error.h"

namespace nmt::cuda {

cudaStream_t device_stream(int device) {
  static std::mutex mutex;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) throw Error(ErrorCode::kInvalidArgument, "device_stream: negative device");
  if (streams.size() <= size_t(device)) streams.resize(size_t(device) + 1, nullptr);
  cudaStream_t& s = streams[size_t(device)];
  if (!s) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  return s;
}

}  // namespace nmt::cuda
