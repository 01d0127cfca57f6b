#include "model/cuda/device/capture_gate.h"

namespace nmt::cuda {
namespace {

std::shared_mutex& gate() {
  static std::shared_mutex m;
  return m;
}

thread_local int capturing = 0;  // this thread's captures in progress

}  // namespace

CaptureScope::CaptureScope() : lock_(gate()) { ++capturing; }

CaptureScope::~CaptureScope() { --capturing; }

DeviceWideScope::DeviceWideScope() {
  if (capturing == 0) lock_ = std::unique_lock<std::shared_mutex>(gate());
}

}  // namespace nmt::cuda
