#pragma once
// The glossary tests' sentences of the demo model (the CPU's test_glossary_search and the GPU's
// test_glossary_cuda): terms the model would not choose by itself, one or several tokens, one
// to three per sentence.
#include <algorithm>
#include <string>
#include <vector>

namespace nmt::test {

struct GlossaryCase {
  std::string source;
  std::vector<std::string> targets;  // required target terms
};

inline const std::vector<GlossaryCase> kGlossaryCases = {
    {"A dog runs across the yard.", {"Welpe"}},
    {"Two men are playing chess in the park.", {"Herren", "Grünanlage"}},
    {"A woman in a red dress is singing.", {"Gewand"}},
    {"The children are eating ice cream.", {"Kinder", "Speiseeis"}},
    {"A man is riding a bicycle down the street.", {"Fahrrad", "Straße", "Herr"}},
};

// Whether `phrase` occurs in `ids` as a contiguous run.
inline bool holds_phrase(const std::vector<int>& ids, const std::vector<int>& phrase) {
  return std::search(ids.begin(), ids.end(), phrase.begin(), phrase.end()) != ids.end();
}

}  // namespace nmt::test
