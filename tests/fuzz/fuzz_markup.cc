// Arbitrary bytes as an HTML text (fuzz_html) or a Markdown text (fuzz_markdown), through
// server/markup as a format html / markdown request runs it: parsed under the serving
// default depth bound (a refusal is nmt::Error kInvalidArgument), then written back with a
// reordering translation and with its own blocks, and the first written form parsed again.
// Nothing may crash, leak or throw anything else; what parses must write back.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/error.h"
#include "server/markup/markup_document.h"
#include "tests/server/markup/markup_test_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nmt::markup;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<MarkupDocument> doc;
  try {
    doc = parse_markup(NMT_FUZZ_FORMAT, text, MarkupBounds{}, "texts[0]");
  } catch (const nmt::Error& e) {
    if (e.code() != nmt::ErrorCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  const std::string reordered = doc->render(testing::translate_all(*doc));
  doc->render(testing::identity(*doc));
  try {
    auto again = parse_markup(NMT_FUZZ_FORMAT, reordered, MarkupBounds{}, "texts[0]");
    again->render(testing::identity(*again));
  } catch (const nmt::Error& e) {
    // Writing back can deepen a document only by the elements gumbo repairs in.
    if (e.code() != nmt::ErrorCode::kInvalidArgument) __builtin_trap();
  }
  return 0;
}
