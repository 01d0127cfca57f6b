// Arbitrary bytes through the demo model's tokenizer: encode, then decode the ids back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "model/model_config.h"
#include "model/tokenizer.h"

namespace {
const nmt::Tokenizer& tokenizer() {
  static const nmt::ModelConfig config = nmt::ModelConfig::load(NMT_DEMO_MODEL_DIR);
  static const std::unique_ptr<nmt::Tokenizer> tok = nmt::Tokenizer::load(NMT_DEMO_MODEL_DIR, config);
  return *tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto ids = tokenizer().encode(text);
  if (ids.empty()) __builtin_trap();  // </s> is always appended
  for (int id : ids) {
    if (id < 0 || id >= tokenizer().vocab_size()) __builtin_trap();
  }
  (void)tokenizer().decode(ids);
  return 0;
}
