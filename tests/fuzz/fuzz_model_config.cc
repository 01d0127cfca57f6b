// Arbitrary bytes as config.json: parse or refuse with nmt::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config/model_config.h"
#include "model/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto c = nmt::ModelConfig::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    // What the parser accepts must be usable: the checks downstream code relies on.
    if (c.d_model % c.encoder_heads != 0 || c.d_model % c.decoder_heads != 0 || c.vocab_size < 2) {
      __builtin_trap();
    }
  } catch (const nmt::Error&) {
  }
  return 0;
}
