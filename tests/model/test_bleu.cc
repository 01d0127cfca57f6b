#include <gtest/gtest.h>

#include "tests/support/bleu.h"

using nmt::test::corpus_bleu;
using nmt::test::tokenize_13a;

TEST(Bleu, Tokenize13aSplitsPunctuationButNotNumbers) {
  EXPECT_EQ(tokenize_13a("Hello, world."), "Hello , world .");
  EXPECT_EQ(tokenize_13a("It costs 3.50 dollars, ok?"), "It costs 3.50 dollars , ok ?");
  EXPECT_EQ(tokenize_13a("pages 10-12 (see \"x\")"), "pages 10 - 12 ( see \" x \" )");
  EXPECT_EQ(tokenize_13a("a &amp; b"), "a & b");
  EXPECT_EQ(tokenize_13a("Ein Mann fährt Fahrrad."), "Ein Mann fährt Fahrrad .");
}

TEST(Bleu, HandComputedExample) {
  // hyp "a b c d e" (5 tokens) vs ref "a b c d f g" (6 tokens):
  // precisions 4/5, 3/4, 2/3, 1/2 -> geometric mean 0.2^(1/4) = 0.668740;
  // brevity penalty exp(1 - 6/5) = 0.818731; BLEU = 100 * 0.547518 = 54.7518.
  EXPECT_NEAR(corpus_bleu({"a b c d e"}, {"a b c d f g"}), 54.7518, 1e-3);
}

TEST(Bleu, CorpusLevelPoolsCountsAndClips) {
  EXPECT_NEAR(corpus_bleu({"the cat sat on the mat ."}, {"the cat sat on the mat ."}), 100.0, 1e-9);
  // "the the the the" clips unigram matches to the reference count of "the" (2): p1 = 2/4,
  // and no bigram of the hypothesis occurs in the reference -> BLEU 0.
  EXPECT_EQ(corpus_bleu({"the the the the"}, {"the cat is on the mat"}), 0.0);
  EXPECT_THROW(corpus_bleu({"a"}, {}), std::invalid_argument);
}
