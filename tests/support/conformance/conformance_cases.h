#pragma once
// The models the conformance tests run, with their references: the demo model on the
// project's sentences (tests/conformance/demo), then each variant folder of
// tests/conformance/models. A gtest parameter, named for the test list.
#include <cctype>
#include <ostream>
#include <string>
#include <vector>

#include "tests/support/golden.h"

namespace nmt::test {

// |score - transformers'| / max(1, |transformers'|) allowed for identical hypotheses, float32 on
// both sides: the engines agree with torch to ~5e-6 on every model (worst seen: CPU 3.4e-6,
// CUDA 4.8e-6), the rest of the margin is for other GEMM and exp/log kernels.
constexpr double kScoreTolerance = 1e-4;

struct ConformanceCase {
  std::string name;  // "demo" or the variant's folder name
  std::string model_dir;
  std::string references;  // references.jsonl
  // Random weights (the variants): their float32 choices are clear (margins of 1e-4 and more
  // between candidates, see tests/conformance/README.md), their float16 ones less so than a
  // trained model's, so float16 is held to a pooled rate (test_conformance_cuda.cc).
  bool random_weights = false;
};

inline std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> out{{"demo", demo_model_dir(), demo_references_path(), false}};
  for (const std::string& v : conformance_variants()) {
    const std::string dir = conformance_dir() + "/models/" + v;
    out.push_back({v, dir, dir + "/references.jsonl", true});
  }
  return out;
}

inline void PrintTo(const ConformanceCase& c, std::ostream* os) { *os << c.name; }

// gtest names allow [A-Za-z0-9_] only.
inline std::string case_test_name(const ConformanceCase& c) {
  std::string s = c.name;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

}  // namespace nmt::test
