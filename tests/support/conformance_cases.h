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
};

inline std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> out{{"demo", demo_model_dir(), demo_references_path()}};
  for (const std::string& v : conformance_variants()) {
    const std::string dir = conformance_dir() + "/models/" + v;
    out.push_back({v, dir, dir + "/references.jsonl"});
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
