#include <gtest/gtest.h>

#include <vector>

#include "model/config/model_config.h"
#include "model/error.h"
#include "model/text_worker.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/golden.h"

using namespace nmt;

// The demo model's references (tests/conformance/demo): generated ids and transformers'
// decoding of them.
class TextWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = ModelConfig::load(test::demo_model_dir());
    tok_ = Tokenizer::load(test::demo_model_dir(), config_);
    refs_ = test::load_references(test::demo_references_path());
    ASSERT_GT(refs_.size(), 10u);
  }
  // A reference's two hypotheses: its beam-4 best and its greedy one.
  std::vector<test::GoldenHypothesis> hyps(size_t i) const { return {refs_[i].beam4, refs_[i].greedy}; }
  // One translation per reference with those hypotheses' ids, texts empty.
  std::vector<Translation> untexted() const {
    std::vector<Translation> out(refs_.size());
    for (size_t i = 0; i < refs_.size(); ++i)
      for (const auto& h : hyps(i)) out[i].hypotheses.push_back({h.ids, "", 0.f});
    return out;
  }
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<test::GoldenSentence> refs_;
};

// Added one at a time with waits in between (the thread sleeps and wakes again) and in a
// burst: every hypothesis gets transformers' text.
TEST_F(TextWorkerTest, EveryQueuedTranslationGetsItsTexts) {
  std::vector<Translation> out = untexted();
  TextWorker worker(*tok_);
  EXPECT_FALSE(worker.started());
  for (size_t i = 0; i < 3; ++i) {
    worker.add(&out[i]);
    worker.wait();
  }
  EXPECT_TRUE(worker.started());
  for (size_t i = 3; i < out.size(); ++i) worker.add(&out[i]);
  worker.wait();
  size_t texts = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i].hypotheses.size(), 2u);
    for (size_t h = 0; h < 2; ++h, ++texts) {
      ASSERT_FALSE(hyps(i)[h].text.empty());
      EXPECT_EQ(out[i].hypotheses[h].text, hyps(i)[h].text) << "sentence " << i << " hypothesis " << h;
    }
  }
  EXPECT_GT(texts, out.size());
}

// An id outside the vocabulary: wait() throws the tokenizer's error, the other translations
// still get their texts, and the worker goes on.
TEST_F(TextWorkerTest, DecodeErrorReachesWaitAndTheRestGoOn) {
  std::vector<Translation> out = untexted();
  out[1].hypotheses[0].ids.push_back(config_.target_vocab_size + 5);
  TextWorker worker(*tok_);
  for (size_t i = 0; i < 3; ++i) worker.add(&out[i]);
  try {
    worker.wait();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  EXPECT_EQ(out[0].hypotheses[0].text, refs_[0].beam4.text);
  EXPECT_EQ(out[2].hypotheses[0].text, refs_[2].beam4.text);
  worker.add(&out[3]);
  worker.wait();  // the error was reported once
  EXPECT_EQ(out[3].hypotheses[0].text, refs_[3].beam4.text);
}

// Destroyed with work queued and no wait(): it finishes the queue and joins.
TEST_F(TextWorkerTest, DestructorFinishesTheQueue) {
  std::vector<Translation> out = untexted();
  {
    TextWorker worker(*tok_);
    for (Translation& t : out) worker.add(&t);
  }
  EXPECT_EQ(out.back().hypotheses[0].text, refs_.back().beam4.text);
}
