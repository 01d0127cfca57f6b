#pragma once
// The CPU engine's float buffers: a std::vector whose growth leaves new elements
// uninitialized. Every buffer of the engine is written before it is read; zero-filling them
// on growth cost a memset over fresh pages (page faults and 4% of a beam-4 step in the
// profile, when the KV caches were such buffers growing with the positions).
#include <memory>
#include <utility>
#include <vector>

namespace nmt::cpu {

template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialization: no zeroing
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using FloatBuffer = std::vector<float, UninitializedAllocator<float>>;

// Grows v to at least n elements, never shrinks it (no work when a step has fewer rows).
template <class V>
void grow(V* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

}  // namespace nmt::cpu
