#pragma once
// The start of a text to name it in an error message (an oversize sentence, an undetectable
// language): up to 40 bytes, cut between UTF-8 characters, "..." when cut.
#include <string>

namespace nmt {

inline std::string text_excerpt(const std::string& text) {
  constexpr size_t kMax = 40;
  if (text.size() <= kMax) return text;
  size_t end = kMax;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

}  // namespace nmt
