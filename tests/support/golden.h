#pragma once
// References made with transformers' generate(), in the shape of the golden file: the
// repository's own (tests/conformance: the demo model and one folder per model variant) and
// the Multi30k extra (../shared/golden/m30k-en-de-small, registered only when present), and
// the repository paths the tests use.
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
  bool greedy_scored = false;            // the Multi30k file has no greedy score
  std::vector<GoldenHypothesis> nbest4;  // Multi30k: only for the first 100
  // The model families' references (tests/conformance/families): the language pair; empty
  // for Marian's.
  std::string source_language, target_language;
};

std::string repo_root();
std::string demo_model_dir();  // models/m30k-en-de-small
std::string shared_dir();      // ../shared next to the repository (CMake's NMT_SHARED_DIR)
std::string golden_dir();      // shared_dir()/golden/m30k-en-de-small
bool have_golden();
std::string conformance_dir();         // tests/conformance
std::string demo_references_path();    // tests/conformance/demo/references.jsonl
// Folders under tests/conformance/models that hold a references.jsonl, sorted by name.
std::vector<std::string> conformance_variants();
// Folders under tests/conformance/families (M2M-100 / NLLB-200 / mBART-50 variants) that hold a
// references.jsonl, sorted by name.
std::vector<std::string> conformance_families();
// Folders under tests/conformance/refused (models the loader must refuse), sorted by name.
std::vector<std::string> conformance_refused();

// A references file of that shape, in file order; throws std::runtime_error.
std::vector<GoldenSentence> load_references(const std::string& path);
std::vector<GoldenSentence> load_golden();  // golden_test2016.jsonl
// Lines of a gzip-compressed text file (the Multi30k data), via `gzip -dc`.
std::vector<std::string> read_gzip_lines(const std::string& path);
std::vector<std::string> test2016_references();  // German references of test2016

}  // namespace nmt::test
