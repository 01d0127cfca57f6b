#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/config/model_config.h"
#include "model/error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/golden.h"

using namespace nmt;

// The demo model's references (tests/conformance/demo): transformers' MarianTokenizer ids of
// the project's sentences, and its decoding of the generated ids.
class TokenizerReferences : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = ModelConfig::load(test::demo_model_dir());
    tok_ = Tokenizer::load(test::demo_model_dir(), config_);
    refs_ = test::load_references(test::demo_references_path());
    ASSERT_FALSE(refs_.empty());
  }
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<test::GoldenSentence> refs_;
};

TEST_F(TokenizerReferences, AllSourceIdsReproduced) {
  size_t same = 0;
  for (const auto& g : refs_) {
    const auto ids = tok_->encode(g.source);
    if (ids == g.source_ids) ++same;
    else ADD_FAILURE() << "sentence " << g.id << " '" << g.source << "' tokenized differently";
    ASSERT_EQ(ids.back(), config_.eos_id);
  }
  EXPECT_EQ(same, refs_.size());
}

TEST_F(TokenizerReferences, DecodingReferenceIdsGivesTheirText) {
  size_t same = 0, total = 0;
  for (const auto& g : refs_) {
    std::vector<test::GoldenHypothesis> all = g.nbest4;
    all.push_back(g.greedy);
    all.push_back(g.beam4);
    for (const auto& h : all) {
      ++total;
      if (tok_->decode(h.ids) == h.text) ++same;
      else if (total - same <= 3) ADD_FAILURE() << "sentence " << g.id << ": '" << tok_->decode(h.ids) << "' != '" << h.text << "'";
    }
  }
  EXPECT_EQ(same, total);
}

// A writable copy of the demo model's tokenizer files, for variants of them.
class TokenizerCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nmt-tok-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::copy(test::demo_model_dir(), dir_);
    for (auto& e : std::filesystem::directory_iterator(dir_))
      std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
    config_ = ModelConfig::load(dir_.string());
    std::ifstream in(dir_ / "vocab.json");
    vocab_ = nlohmann::json::parse(in);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write_json(const std::string& name, const nlohmann::json& j) const { std::ofstream(dir_ / name) << j.dump(); }
  std::filesystem::path dir_;
  ModelConfig config_;
  nlohmann::json vocab_;
};

// MarianTokenizer.remove_language_code: a leading ">>xxx<<" is one token, looked up in
// vocab.json (an unknown code is <unk>); anywhere else the text goes to SentencePiece.
TEST_F(TokenizerCopy, LeadingLanguageCodeIsOneToken) {
  const int fra = 7990;  // give a rare piece's id to the code
  for (auto it = vocab_.begin(); it != vocab_.end(); ++it) {
    if (it.value() == fra) {
      vocab_.erase(it);
      break;
    }
  }
  vocab_[">>fra<<"] = fra;
  write_json("vocab.json", vocab_);
  const auto tok = Tokenizer::load(dir_.string(), config_);
  const std::vector<int> plain = tok->encode("A man is riding a bike.");
  std::vector<int> want{fra};
  want.insert(want.end(), plain.begin(), plain.end());
  EXPECT_EQ(tok->encode(">>fra<< A man is riding a bike."), want);
  EXPECT_EQ(tok->encode(">>fra<<A man is riding a bike."), want);
  const int unk = vocab_["<unk>"].get<int>();
  EXPECT_EQ(tok->encode(">>xyz<< A man is riding a bike.").front(), unk);
  // Not at the start, or not closed: plain SentencePiece text.
  EXPECT_NE(tok->encode(" >>fra<< A man.").front(), fra);
  EXPECT_NE(tok->encode(">>fra A man.").front(), fra);
}

// Separate vocabularies: decode() reads target_vocab.json, encode() vocab.json.
TEST_F(TokenizerCopy, SeparateTargetVocabularyDecodes) {
  const auto shared = Tokenizer::load(dir_.string(), config_);
  const int a = vocab_["▁Mann"].get<int>(), b = vocab_["▁Hund"].get<int>();
  nlohmann::json target = vocab_;
  target["▁Mann"] = b;
  target["▁Hund"] = a;
  write_json("target_vocab.json", target);
  write_json("tokenizer_config.json", {{"separate_vocabs", true}});
  const auto separate = Tokenizer::load(dir_.string(), config_);
  EXPECT_EQ(separate->decode({a, 0}), shared->decode({b, 0}));
  EXPECT_EQ(separate->encode("Mann"), shared->encode("Mann"));
  // A target vocabulary larger than the source one: decoder_vocab_size sizes it.
  target["▁extra"] = config_.vocab_size;
  write_json("target_vocab.json", target);
  EXPECT_THROW(Tokenizer::load(dir_.string(), config_), Error);
  ModelConfig wider = config_;
  wider.share_embeddings = false;
  wider.target_vocab_size = config_.vocab_size + 1;
  EXPECT_EQ(Tokenizer::load(dir_.string(), wider)->decode({config_.vocab_size}), "extra");
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
