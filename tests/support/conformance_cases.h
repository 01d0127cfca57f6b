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

struct ConformanceCase {
  std::string name;  // "demo" or the variant's folder name
  std::string model_dir;
  std::string references;  // references.jsonl
  // |score - transformers'| / max(1, |transformers'|) allowed for identical hypotheses (float32
  // on both sides). The demo model's trained weights agree to ~1e-6. The variants' random
  // weights, scaled up so that their choices are clear (attention and FFN gains of 6, output 9),
  // make every score ~50x more sensitive to float32 summation order: the engine's own scores
  // move by up to 6e-5 between batch 1 and batch 16 there, and differ from torch's (other GEMM,
  // exp and log kernels) by up to 1.2e-3.
  double score_tolerance = 1e-4;
  // The variants' weights are random: their choices are clear at float32 (margins of 1e-4 and
  // more between candidates) but not at float16, whose rounding (1e-3) the gains amplify.
  bool random_weights = false;
};

inline std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> out{{"demo", demo_model_dir(), demo_references_path(), 1e-4, false}};
  for (const std::string& v : conformance_variants()) {
    const std::string dir = conformance_dir() + "/models/" + v;
    out.push_back({v, dir, dir + "/references.jsonl", 2e-3, true});
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
