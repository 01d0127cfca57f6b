// Golden test2016 on the CPU in float32 against transformers' generate().
#include <gtest/gtest.h>

#include "model/translator.h"
#include "tests/support/bleu.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

class GoldenCpu : public ::testing::Test {
 protected:
  // No exception out of here: gtest turns a fatal failure in SetUpTestSuite into
  // "[  SKIPPED ]" for every test of the suite, which ctest counts as skipped. A failure to
  // read the references or load the model is kept for SetUp() to fail each test with.
  static void SetUpTestSuite() {
    if (!test::have_golden()) return;
    try {
      golden_ = new std::vector<test::GoldenSentence>(test::load_golden());
      TranslatorOptions o;
      o.device = Device::kCpu;
      translator_ = Translator::load(test::demo_model_dir(), o).release();
    } catch (const std::exception& e) {
      setup_error_ = std::string("SetUpTestSuite: ") + e.what();
    }
  }
  static void TearDownTestSuite() {
    delete translator_;
    delete golden_;
  }
  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    if (!golden_) GTEST_SKIP() << "golden references absent: " << test::golden_dir();
  }
  // Translates the first n golden sources from their ids, in batches of batch_size.
  static std::vector<Translation> run(size_t n, int batch_size, const DecodeOptions& o) {
    std::vector<Translation> out;
    for (size_t b = 0; b < n; b += size_t(batch_size)) {
      std::vector<std::vector<int>> ids;
      for (size_t i = b; i < std::min(n, b + size_t(batch_size)); ++i) ids.push_back((*golden_)[i].source_ids);
      for (auto& t : translator_->translate_ids(ids, o)) out.push_back(std::move(t));
    }
    return out;
  }
  static DecodeOptions beam(int k, int n = 1) {
    DecodeOptions o;
    o.beam_size = k;
    o.num_hypotheses = n;
    return o;
  }
  static const std::vector<Translation>& beam4_batch32() {
    static const std::vector<Translation> r = run(golden_->size(), 32, beam(4));
    return r;
  }
  static std::vector<test::GoldenSentence>* golden_;
  static Translator* translator_;
  static std::string setup_error_;  // why SetUpTestSuite could not load the references or model
};

std::vector<test::GoldenSentence>* GoldenCpu::golden_ = nullptr;
Translator* GoldenCpu::translator_ = nullptr;
std::string GoldenCpu::setup_error_;

}  // namespace

TEST_F(GoldenCpu, Beam4IdsMatchTransformers) {
  const auto& r = beam4_batch32();
  int same = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    same += r[i].hypotheses[0].ids == (*golden_)[i].beam4.ids;
    // Scores of identical hypotheses agree to float32 rounding.
    if (r[i].hypotheses[0].ids == (*golden_)[i].beam4.ids) {
      EXPECT_NEAR(r[i].hypotheses[0].score, (*golden_)[i].beam4.score, 1e-4) << "sentence " << i;
    }
  }
  std::cout << "beam-4 identical: " << same << " / " << r.size() << "\n";
  EXPECT_GE(same, 980);
}

TEST_F(GoldenCpu, GreedyIdsMatchTransformers) {
  const auto r = run(golden_->size(), 32, beam(1));
  int same = 0;
  for (size_t i = 0; i < r.size(); ++i) same += r[i].hypotheses[0].ids == (*golden_)[i].greedy.ids;
  std::cout << "greedy identical: " << same << " / " << r.size() << "\n";
  EXPECT_GE(same, 995);
}

TEST_F(GoldenCpu, FourBestListsMatchTransformers) {
  const auto r = run(100, 32, beam(4, 4));
  int same = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const auto& want = (*golden_)[i].nbest4;
    ASSERT_EQ(want.size(), 4u);
    bool all = r[i].hypotheses.size() == 4;
    for (size_t h = 0; all && h < 4; ++h) all = r[i].hypotheses[h].ids == want[h].ids;
    same += all;
  }
  std::cout << "4-best identical: " << same << " / 100\n";
  EXPECT_GE(same, 95);
}

TEST_F(GoldenCpu, BatchSizeOneEqualsBatchSize32) {
  const auto& batched = beam4_batch32();
  const auto single = run(golden_->size(), 1, beam(4));
  int differ = 0;
  for (size_t i = 0; i < single.size(); ++i) {
    if (single[i].hypotheses[0].ids != batched[i].hypotheses[0].ids) {
      ++differ;
      ADD_FAILURE() << "sentence " << i << " differs between batch 1 and batch 32";
    }
  }
  EXPECT_EQ(differ, 0);
}

TEST_F(GoldenCpu, BleuAgainstReferences) {
  const auto refs = test::test2016_references();
  ASSERT_EQ(refs.size(), golden_->size());
  std::vector<std::string> hyps;
  for (const auto& t : beam4_batch32()) hyps.push_back(t.hypotheses[0].text);
  const double bleu = test::corpus_bleu(hyps, refs);
  std::cout << "BLEU (13a) on test2016: " << bleu << "\n";
  EXPECT_NEAR(bleu, 37.61, 0.2);
}

// int8 weights (per-row quantization at load, activations per row on the fly): beam-4 BLEU
// within 0.3 of float32's on test2016 (issue 16's bound), and how often the output is the
// float32 engine's, token for token.
TEST_F(GoldenCpu, Int8BleuWithinBoundOfFloat32) {
  TranslatorOptions o;
  o.device = Device::kCpu;
  o.precision = Precision::kInt8;
  const auto int8 = Translator::load(test::demo_model_dir(), o);
  const auto refs = test::test2016_references();
  std::vector<std::string> f32_hyps, int8_hyps;
  int same = 0;
  const auto& f32 = beam4_batch32();
  for (size_t b = 0; b < golden_->size(); b += 32) {
    std::vector<std::vector<int>> ids;
    for (size_t i = b; i < std::min(golden_->size(), b + 32); ++i) ids.push_back((*golden_)[i].source_ids);
    for (auto& t : int8->translate_ids(ids, beam(4))) {
      const size_t i = int8_hyps.size();
      same += t.hypotheses[0].ids == f32[i].hypotheses[0].ids;
      int8_hyps.push_back(t.hypotheses[0].text);
      f32_hyps.push_back(f32[i].hypotheses[0].text);
    }
  }
  const double f32_bleu = test::corpus_bleu(f32_hyps, refs), int8_bleu = test::corpus_bleu(int8_hyps, refs);
  std::cout << "int8 BLEU " << int8_bleu << " vs float32 " << f32_bleu << "; token-identical to float32: "
            << same << " / " << golden_->size() << "\n";
  EXPECT_NEAR(int8_bleu, f32_bleu, 0.3);
}
