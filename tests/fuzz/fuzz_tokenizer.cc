// Arbitrary bytes through the tokenizers of each scheme (the demo model's Marian one, the
// generated NLLB-200 and M2M-100 families'): encode, then decode the ids back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/tokenizer/tokenizer.h"

namespace {
const std::vector<std::unique_ptr<nmt::Tokenizer>>& tokenizers() {
  static const auto all = [] {
    std::vector<std::unique_ptr<nmt::Tokenizer>> out;
    for (const std::string dir : {std::string(NMT_DEMO_MODEL_DIR), std::string(NMT_FAMILIES_DIR) + "/nllb",
                                  std::string(NMT_FAMILIES_DIR) + "/m2m100"}) {
      out.push_back(nmt::Tokenizer::load(dir, nmt::ModelConfig::load(dir)));
    }
    return out;
  }();
  return all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto& tok : tokenizers()) {
    const auto ids = tok->encode(text);
    if (ids.empty()) __builtin_trap();  // </s> is always appended
    for (int id : ids) {
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    }
    (void)tok->decode(ids);
  }
  return 0;
}
