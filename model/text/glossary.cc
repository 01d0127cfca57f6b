#include "model/text/glossary.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <fstream>
#include <stdexcept>

namespace nmt {
namespace {

bool word_char(UChar32 c) {
  return c >= 0 && (u_isalnum(c) || (U_GET_GC_MASK(c) & U_GC_M_MASK) != 0 || c == '_');
}

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  int32_t i = 0;
  const int32_t n = int32_t(s.size());
  while (i < n) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return false;
  }
  return true;
}

}  // namespace

bool occurs_as_words(const std::string& text, const std::string& term) {
  if (term.empty()) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(text.size());
  for (size_t at = text.find(term); at != std::string::npos; at = text.find(term, at + 1)) {
    bool before = false, after = false;
    if (at > 0) {
      int32_t i = int32_t(at);
      UChar32 c;
      U8_PREV(p, 0, i, c);
      before = word_char(c);
    }
    const int32_t end = int32_t(at + term.size());
    if (end < n) {
      int32_t i = end;
      UChar32 c;
      U8_NEXT(p, i, n, c);
      after = word_char(c);
    }
    // the term's own first / last characters decide nothing: "C++" ends in no word character
    if (!before && !after) return true;
  }
  return false;
}

std::vector<size_t> glossary_matches(const std::vector<GlossaryEntry>& entries, const std::string& text) {
  std::vector<size_t> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (occurs_as_words(text, entries[i].source)) out.push_back(i);
  }
  return out;
}

std::vector<GlossaryEntry> load_glossary_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("glossary file " + path + " cannot be read");
  std::vector<GlossaryEntry> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(number);
    if (!valid_utf8(line)) throw std::runtime_error(where + ": not UTF-8");
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos)
      throw std::runtime_error(where + ": expected source<TAB>target (exactly one tab)");
    GlossaryEntry e{line.substr(0, tab), line.substr(tab + 1)};
    if (e.source.empty() || e.target.empty()) throw std::runtime_error(where + ": an empty term");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace nmt
