#pragma once
// A translation the tests can compute: each block's words in reverse order, upper-cased
// (ASCII), with the exact alignment of each target word to its source word. It reorders
// every tag, so a tag that follows its words proves the alignments were followed.
#include <cctype>
#include <string>
#include <vector>

#include "server/markup/markup_document.h"

namespace nmt::markup::testing {

inline TranslatedBlock reverse_upper(const std::string& text) {
  std::vector<ByteRange> words;
  for (std::size_t i = 0; i < text.size();) {
    while (i < text.size() && text[i] == ' ') ++i;
    const std::size_t b = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i > b) words.push_back({b, i});
  }
  TranslatedBlock t;
  for (std::size_t k = words.size(); k-- > 0;) {
    if (!t.text.empty()) t.text += ' ';
    const ByteRange target{t.text.size(), t.text.size() + (words[k].end - words[k].begin)};
    for (std::size_t i = words[k].begin; i < words[k].end; ++i)
      t.text += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    t.links.push_back({words[k], target});
  }
  return t;
}

inline std::vector<TranslatedBlock> translate_all(const MarkupDocument& doc) {
  std::vector<TranslatedBlock> out;
  for (const Block& b : doc.blocks()) out.push_back(reverse_upper(b.text));
  return out;
}

// The blocks unchanged, each word aligned to itself.
inline std::vector<TranslatedBlock> identity(const MarkupDocument& doc) {
  std::vector<TranslatedBlock> out;
  for (const Block& b : doc.blocks()) {
    TranslatedBlock t{b.text, {}};
    for (std::size_t i = 0; i < b.text.size();) {
      while (i < b.text.size() && b.text[i] == ' ') ++i;
      const std::size_t s = i;
      while (i < b.text.size() && b.text[i] != ' ') ++i;
      if (i > s) t.links.push_back({{s, i}, {s, i}});
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace nmt::markup::testing
