// The repetition controls' token edits (model/decoding/controls/token_edits.h) against hand-worked
// cases of transformers' NoRepeatNGram, NoBadWords and RepetitionPenalty processors.
#include "model/decoding/controls/token_edits.h"

#include <gtest/gtest.h>

#include <map>

#include "model/decoding/engine.h"
#include "model/error.h"

namespace nmt {
namespace {

std::map<int, float> edits_of(const std::vector<int>& history, const DecodeOptions& o) {
  TokenEdits e;
  std::vector<int> tokens;
  std::vector<float> factors;
  e.append(history, o, &tokens, &factors);
  std::map<int, float> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_TRUE(out.emplace(tokens[i], factors[i]).second) << "token " << tokens[i] << " edited twice";
  }
  return out;
}

TEST(TokenEdits, NoRepeatNgramBansWhatFollowedTheLastTokens) {
  DecodeOptions o;
  o.no_repeat_ngram_size = 3;
  // start 0, then 5 6 7 5 6: the trigram (5 6 7) exists, the key is (5 6): 7 banned.
  EXPECT_EQ(edits_of({0, 5, 6, 7, 5, 6}, o), (std::map<int, float>{{7, 0.f}}));
  // no earlier (6 5): nothing
  EXPECT_TRUE(edits_of({0, 5, 6, 7, 6, 5}, o).empty());
  // cur_len + 1 < n: nothing even where the tokens repeat
  EXPECT_TRUE(edits_of({0}, o).empty());
  // size 1 bans every token held, the decoder start included (transformers' input_ids)
  o.no_repeat_ngram_size = 1;
  EXPECT_EQ(edits_of({0, 4, 4}, o), (std::map<int, float>{{0, 0.f}, {4, 0.f}}));
  // size 2 over a run of one token: (4 4) follows 4
  o.no_repeat_ngram_size = 2;
  EXPECT_EQ(edits_of({0, 4, 4}, o), (std::map<int, float>{{4, 0.f}}));
}

TEST(TokenEdits, SuppressSequencesBanTheLastTokenAfterTheirPrefix) {
  DecodeOptions o;
  o.suppress_sequences = {{9}, {3, 4}, {1, 2, 3}};
  EXPECT_EQ(edits_of({0}, o), (std::map<int, float>{{9, 0.f}}));
  EXPECT_EQ(edits_of({0, 3}, o), (std::map<int, float>{{9, 0.f}, {4, 0.f}}));
  EXPECT_EQ(edits_of({0, 1, 2}, o), (std::map<int, float>{{9, 0.f}, {3, 0.f}}));
  EXPECT_EQ(edits_of({0, 2}, o), (std::map<int, float>{{9, 0.f}}));  // (1 2) is not the suffix
}

TEST(TokenEdits, RepetitionPenaltyOncePerTokenAndBansWin) {
  DecodeOptions o;
  o.repetition_penalty = 1.5f;
  EXPECT_EQ(edits_of({0, 7, 7, 8}, o), (std::map<int, float>{{0, 1.5f}, {7, 1.5f}, {8, 1.5f}}));
  o.suppress_sequences = {{7, 8}, {8}};
  EXPECT_EQ(edits_of({0, 7}, o), (std::map<int, float>{{0, 1.5f}, {7, 1.5f}, {8, 0.f}}));
  // marks do not leak from one call to the next
  TokenEdits e;
  std::vector<int> t;
  std::vector<float> f;
  e.append({0, 7}, o, &t, &f);
  t.clear();
  f.clear();
  e.append({0, 3}, o, &t, &f);
  EXPECT_EQ(t, (std::vector<int>{8, 0, 3}));
}

TEST(TokenEdits, EditedScoreIsTransformersRepetitionPenalty) {
  EXPECT_FLOAT_EQ(edited_score(-2.f, 1.5f), -3.f);
  EXPECT_FLOAT_EQ(edited_score(3.f, 1.5f), 2.f);
  EXPECT_FLOAT_EQ(edited_score(0.f, 1.5f), 0.f);
  EXPECT_EQ(edited_score(3.f, 0.f), -__builtin_inff());
}

TEST(DecodeOptionsRepetition, ValidationNamesTheField) {
  auto message = [](const DecodeOptions& o) {
    try {
      o.validate_repetition(100, 2);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string();
  };
  DecodeOptions o;
  EXPECT_EQ(message(o), "");
  o.no_repeat_ngram_size = -1;
  EXPECT_NE(message(o).find("no_repeat_ngram_size"), std::string::npos);
  o.no_repeat_ngram_size = DecodeOptions::kMaxNoRepeatNgramSize + 1;
  EXPECT_NE(message(o).find("no_repeat_ngram_size"), std::string::npos);
  o = DecodeOptions();
  for (float p : {0.f, -1.f, __builtin_inff(), __builtin_nanf("")}) {
    o.repetition_penalty = p;
    EXPECT_NE(message(o).find("repetition_penalty"), std::string::npos) << p;
  }
  o = DecodeOptions();
  o.suppress_sequences = {{5}, {100}};
  EXPECT_NE(message(o).find("suppress_sequences[1]"), std::string::npos);
  o.suppress_sequences = {{}};
  EXPECT_NE(message(o).find("suppress_sequences[0] is empty"), std::string::npos);
  o.suppress_sequences = {{2}};
  EXPECT_NE(message(o).find("end-of-sentence"), std::string::npos);
  o.suppress_sequences.assign(size_t(DecodeOptions::kMaxSuppressSequences) + 1, {5});
  EXPECT_NE(message(o).find("at most"), std::string::npos);
  o.suppress_sequences = {std::vector<int>(size_t(DecodeOptions::kMaxSuppressSequenceTokens) + 1, 5)};
  EXPECT_NE(message(o).find("tokens; at most"), std::string::npos);
}

}  // namespace
}  // namespace nmt
