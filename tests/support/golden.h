#pragma once
// The golden references made with transformers (../shared/golden/m30k-en-de-small) and the
// repository paths the tests use. Tests that need them skip when they are absent.
#include <string>
#include <vector>

namespace nmt::test {

struct GoldenHypothesis {
  std::vector<int> ids;  // EOS included
  std::string text;
  float score = 0.f;
};

struct GoldenSentence {
  int id = 0;
  std::string source;
  std::vector<int> source_ids;
  GoldenHypothesis beam4;
  GoldenHypothesis greedy;
  std::vector<GoldenHypothesis> nbest4;  // only for the first 100
};

std::string repo_root();
std::string demo_model_dir();  // models/m30k-en-de-small
std::string shared_dir();      // ../shared next to the repository
std::string golden_dir();      // shared_dir()/golden/m30k-en-de-small
bool have_golden();

std::vector<GoldenSentence> load_golden();  // golden_test2016.jsonl, in file order
// Lines of a gzip-compressed text file (the Multi30k data), via `gzip -dc`.
std::vector<std::string> read_gzip_lines(const std::string& path);
std::vector<std::string> test2016_references();  // German references of test2016

}  // namespace nmt::test
