#include "model/host_memory.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

// gperftools' C entry point, declared weak so that programs without tcmalloc (the CLI, the
// tests, the sanitizer builds, whose allocator is the sanitizer's) link and use glibc's.
extern "C" void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));

namespace nmt {

void release_free_heap_memory() {
  if (MallocExtension_ReleaseFreeMemory != nullptr) {
    MallocExtension_ReleaseFreeMemory();
    return;
  }
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace nmt
