#pragma once
// Glossary entries (source term -> required target term) and where a source term occurs in a
// sentence (docs/decoding.md, "Glossary"). Matching is on whole words and case-sensitive: a
// term matches where its bytes occur with no letter, digit or mark (Unicode, ICU's
// u_isalnum / general category M) on either side, so that "US" does not match "us", nor
// "cat" "category"; terminology is spelled as the customer wrote it (brand names, acronyms),
// and one who wants another spelling adds it as an entry of its own.
#include <string>
#include <vector>

namespace nmt {

struct GlossaryEntry {
  std::string source;
  std::string target;
};

// Whether `term` occurs in `text` as whole words (above).
bool occurs_as_words(const std::string& text, const std::string& term);

// The indices of the entries whose source term occurs in `text`, in entry order.
std::vector<size_t> glossary_matches(const std::vector<GlossaryEntry>& entries, const std::string& text);

// A glossary file: one entry a line, `source<TAB>target` (UTF-8); blank lines and lines that
// start with `#` are skipped. Throws std::runtime_error naming the file and line for a line
// without exactly one tab, an empty term, or invalid UTF-8.
std::vector<GlossaryEntry> load_glossary_file(const std::string& path);

}  // namespace nmt
