#pragma once
// What the server's completion queue hands back (server/grpc/queue_threads.h): every operation
// of a call on gRPC's asynchronous API is started with the address of one of its
// QueueEvents as the tag, and the thread that takes the tag off the queue fires it.
//
// handoff() before starting such an operation and the arrival in fire() show
// ThreadSanitizer the order gRPC's core gives them (Debian's gRPC is not instrumented, so
// it sees none); both are nothing outside ThreadSanitizer builds.
#if defined(__SANITIZE_THREAD__)
#define NMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NMT_TSAN 1
#endif
#endif
#ifdef NMT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace nmt::server {

inline void handoff([[maybe_unused]] void* tag) {
#ifdef NMT_TSAN
  __tsan_release(tag);
#endif
}
inline void arrived([[maybe_unused]] void* tag) {
#ifdef NMT_TSAN
  __tsan_acquire(tag);
#endif
}

struct QueueEvent {
  void* object;
  void (*react)(void* object, bool ok);

  // The operation came back: ok as gRPC's completion queue gives it.
  void fire(bool ok) {
    arrived(this);
    react(object, ok);
  }
};

// The event that calls object->Member(ok).
template <class T, void (T::*Member)(bool)>
QueueEvent queue_event(T* object) {
  return {object, [](void* o, bool ok) { (static_cast<T*>(o)->*Member)(ok); }};
}

}  // namespace nmt::server
