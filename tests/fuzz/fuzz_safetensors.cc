// Arbitrary bytes as a safetensors file: the header parser must reject or accept them
// with nmt::Error only, never crash or read outside the buffer.
#include <cstddef>
#include <cstdint>

#include "model/config/safetensors.h"
#include "model/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    size_t offset = 0;
    const auto entries = nmt::parse_safetensors_header(data, size, "fuzz", &offset);
    for (const auto& [name, e] : entries) {
      if (offset + e.end > size || e.begin > e.end) __builtin_trap();  // parser promised in-bounds
    }
  } catch (const nmt::Error&) {
  }
  return 0;
}
