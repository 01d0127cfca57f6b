#pragma once
// English test sentences for the server tests: the project's own conformance sentences
// (tests/conformance/sentences.en), then (beyond them) sentences built from templates.
#include <filesystem>
#include <string>
#include <vector>

#include "tools/loadgen/sentence_source.h"

namespace nmt::test {

inline const std::string kOwnSentences = std::string(NMT_REPO_ROOT) + "/tests/conformance/sentences.en";

// n distinct sentences shorter than max_chars.
inline std::vector<std::string> sentences(size_t n, size_t max_chars = 120) {
  std::vector<std::string> out;
  if (std::filesystem::exists(kOwnSentences)) {
    for (const std::string& s : nmt::loadgen::read_sentences(kOwnSentences)) {
      if (out.size() == n) break;
      if (s.size() < max_chars) out.push_back(s);
    }
  }
  const char* who[] = {"A man", "Two women", "A little girl", "A black dog", "Three boys", "An old man"};
  const char* what[] = {"is riding a bike", "are playing soccer", "is eating an apple",
                        "is running", "are sitting on a bench", "is swimming"};
  const char* where[] = {"in the park.", "on the street.", "near the water."};
  for (size_t i = 0; out.size() < n; ++i) {
    out.push_back(std::string(who[i % 6]) + " " + what[(i / 6) % 6] + " " + where[(i / 36) % 3]);
  }
  return out;
}

}  // namespace nmt::test
