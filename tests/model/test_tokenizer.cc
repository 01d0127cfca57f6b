#include <gtest/gtest.h>

#include "model/error.h"
#include "model/model_config.h"
#include "model/tokenizer.h"
#include "tests/support/golden.h"

using namespace nmt;

class TokenizerGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_golden()) GTEST_SKIP() << "golden references absent: " << test::golden_dir();
    config_ = ModelConfig::load(test::demo_model_dir());
    tok_ = Tokenizer::load(test::demo_model_dir(), config_);
    golden_ = test::load_golden();
    ASSERT_EQ(golden_.size(), 1000u);
  }
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<test::GoldenSentence> golden_;
};

TEST_F(TokenizerGolden, AllSourceIdsReproduced) {
  int same = 0;
  for (const auto& g : golden_) {
    const auto ids = tok_->encode(g.source);
    if (ids == g.source_ids) ++same;
    else ADD_FAILURE() << "sentence " << g.id << " '" << g.source << "' tokenized differently";
    ASSERT_EQ(ids.back(), config_.eos_id);
  }
  EXPECT_EQ(same, 1000);
}

TEST_F(TokenizerGolden, DecodingGoldenIdsGivesGoldenText) {
  int same = 0;
  for (const auto& g : golden_) same += tok_->decode(g.beam4.ids) == g.beam4.text;
  EXPECT_EQ(same, 1000);
}

TEST(Tokenizer, UnknownIdIsAnError) {
  const auto config = ModelConfig::load(test::demo_model_dir());
  const auto tok = Tokenizer::load(test::demo_model_dir(), config);
  try {
    tok->decode({5, 123456});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 123456 is not in the vocabulary"), std::string::npos) << e.what();
  }
}
