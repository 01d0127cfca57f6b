#pragma once

namespace nmt {

// Gives the heap's free memory back to the system: tcmalloc's free lists when the program
// links Debian's tcmalloc (nmt-server does: docs/server.md, "Memory allocator"), glibc's
// arenas (malloc_trim) otherwise. For the moments when a large owner has just gone (a
// retired model version, the CPU engine's step buffers once its last sentence leaves), so
// that its memory does not stay resident in free lists that the next owner's threads never
// reuse.
void release_free_heap_memory();

}  // namespace nmt
