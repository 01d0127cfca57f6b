// Conformance on the CPU engine (float32): every model of tests/conformance translates its
// references' sources exactly as transformers' generate() did (greedy, beam 4, 4-best lists:
// token-identical, scores to float32 rounding), from the tokenizer's own source ids.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "model/error.h"
#include "model/translator.h"
#include "tests/support/conformance.h"
#include "tests/support/conformance_cases.h"

using namespace nmt;
using test::Search;

namespace {

struct Loaded {
  std::unique_ptr<Translator> translator;
  std::vector<test::GoldenSentence> refs;
  int max_decoding_length = 255;
};

// One load per model for its four tests.
Loaded& loaded(const test::ConformanceCase& c) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(c.name);
  if (it != cache.end()) return it->second;
  Loaded l;
  TranslatorOptions o;
  o.device = Device::kCpu;
  l.translator = Translator::load(c.model_dir, o);
  l.refs = test::load_references(c.references);
  l.max_decoding_length = test::reference_max_decoding_length(c.references);
  return cache[c.name] = std::move(l);
}

class Conformance : public ::testing::TestWithParam<test::ConformanceCase> {
 protected:
  void expect_exact(Search search) {
    Loaded& l = loaded(GetParam());
    ASSERT_FALSE(l.refs.empty()) << GetParam().references << " holds no references";
    const test::Comparison c = test::compare(*l.translator, l.refs, search, 16, l.max_decoding_length);
    std::cout << GetParam().name << " " << test::search_name(search) << ": " << c.identical << " / " << c.sentences
              << " identical, worst score error " << c.worst_score_error << "\n";
    EXPECT_EQ(c.identical, c.sentences) << c.first_difference;
    EXPECT_EQ(c.texts_differ, 0) << "identical ids, different text: " << c.first_text_difference;
    EXPECT_LE(c.worst_score_error, test::kScoreTolerance);
    EXPECT_EQ(c.malformed, 0) << c.first_malformed;
  }
};

}  // namespace

TEST_P(Conformance, SourceIdsAreTheTokenizers) {
  Loaded& l = loaded(GetParam());
  ASSERT_FALSE(l.refs.empty());
  size_t same = 0;
  for (const auto& g : l.refs) {
    const bool eq = l.translator->tokenizer().encode(g.source) == g.source_ids;
    if (!eq && same + 3 > &g - l.refs.data()) ADD_FAILURE() << "sentence " << g.id << ": " << g.source;
    same += eq;
  }
  std::cout << GetParam().name << " source ids: " << same << " / " << l.refs.size() << " identical\n";
  EXPECT_EQ(same, l.refs.size());
}

TEST_P(Conformance, GreedyIsExact) { expect_exact(Search::kGreedy); }
TEST_P(Conformance, Beam4IsExact) { expect_exact(Search::kBeam4); }
TEST_P(Conformance, FourBestListsAreExact) { expect_exact(Search::kFourBest); }

INSTANTIATE_TEST_SUITE_P(Models, Conformance, ::testing::ValuesIn(test::conformance_cases()),
                         [](const auto& info) { return test::case_test_name(info.param); });

// tests/conformance/refused/<name>: a model the loader refuses with a one-line error naming
// the config field of its meta.json ("refuse_field").
class Refused : public ::testing::TestWithParam<std::string> {};

TEST_P(Refused, LoadFailsNamingTheField) {
  const std::string dir = test::conformance_dir() + "/refused/" + GetParam();
  std::ifstream meta(dir + "/meta.json");
  const std::string field = nlohmann::json::parse(meta).at("refuse_field").get<std::string>();
  TranslatorOptions o;
  o.device = Device::kCpu;
  try {
    Translator::load(dir, o);
    ADD_FAILURE() << dir << " loaded; expected an error naming '" << field << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::cout << GetParam() << ": " << msg << "\n";
    EXPECT_NE(msg.find("'" + field + "'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Refused, ::testing::ValuesIn(test::conformance_refused()),
                         [](const auto& info) { return test::case_test_name({info.param, "", ""}); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Refused);
