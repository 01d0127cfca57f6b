#pragma once
// Corpus BLEU as sacreBLEU computes it by default: 13a tokenization, n-grams 1..4, one
// reference per sentence, brevity penalty; score in 0..100.
#include <string>
#include <vector>

namespace nmt::test {

std::string tokenize_13a(const std::string& line);
double corpus_bleu(const std::vector<std::string>& hypotheses,
                   const std::vector<std::string>& references);

}  // namespace nmt::test
