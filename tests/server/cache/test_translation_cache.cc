// The translation cache (server/cache/translation_cache.h): a hit is the miss's
// translation bit for bit, the byte bound, least-recently-used eviction, a newer version of
// a model drops the older one's entries, every option is part of the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "server/cache/translation_cache.h"

using namespace nmt;
using namespace nmt::server;

namespace {

Translation translation(const std::string& text, float score) {
  Translation t;
  t.hypotheses.push_back({{5, 6, 7, 2}, text, score});
  t.hypotheses.push_back({{5, 8, 2}, text + "?", std::nextafter(score, -1.0f)});
  return t;
}

bool same_bits(const Translation& a, const Translation& b) {
  if (a.hypotheses.size() != b.hypotheses.size()) return false;
  for (size_t i = 0; i < a.hypotheses.size(); ++i) {
    const Hypothesis &x = a.hypotheses[i], &y = b.hypotheses[i];
    if (x.ids != y.ids || x.text != y.text || std::memcmp(&x.score, &y.score, sizeof(float)) != 0) return false;
  }
  return true;
}

std::string key(int sentence, uint64_t generation = 1, DecodeOptions options = {}) {
  return TranslationCache::key(generation, options, {sentence, sentence + 1, 2});
}

TEST(TranslationCache, AHitIsTheMissBitForBit) {
  TranslationCache cache(1 << 20);
  EXPECT_FALSE(cache.find("m", 1, key(1)));
  const Translation miss = translation("Ein Hund.", -0.123456789f);
  cache.insert("m", 1, key(1), miss);
  const std::optional<Translation> hit = cache.find("m", 1, key(1));
  ASSERT_TRUE(hit);
  EXPECT_TRUE(same_bits(*hit, miss));
}

TEST(TranslationCache, EveryOptionIsPartOfTheKey) {
  std::vector<DecodeOptions> variants(11);
  variants[1].beam_size = 2;
  variants[2].num_hypotheses = 2;
  variants[3].length_penalty = 0.5f;
  variants[4].max_decoding_length = 20;
  variants[5].min_decoding_length = 3;
  variants[6].forced_bos_id = 9;
  variants[7].return_scores = true;
  variants[8].target_prefix = {5};  // target_prefix: its ids and their count
  variants[9].target_prefix = {5, 6};
  variants[10].target_prefix = {6};
  for (size_t i = 0; i < variants.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(key(1, 1, variants[i]), key(1, 1, variants[j])) << i << " " << j;
  }
  EXPECT_NE(key(1, 1), key(1, 2)) << "the model's version";
  EXPECT_NE(key(1), key(2)) << "the sentence";
}

// A hit must carry the alignments the request asks for (and none when it does not).
TEST(TranslationCache, ReturnAlignmentsIsPartOfTheKey) {
  DecodeOptions plain, aligned;
  aligned.return_alignments = true;
  EXPECT_NE(key(1, 1, plain), key(1, 1, aligned));
}

// Sampling: every warper and the seed change the key; an unseeded sampled sentence is never
// kept (its output is drawn afresh), a seeded one is.
TEST(TranslationCache, SamplingOptionsAreKeyedAndUnseededSamplingIsNotCached) {
  DecodeOptions base;
  base.beam_size = 1;
  base.sampling_topk = 0;
  base.has_seed = true;
  std::vector<DecodeOptions> variants(6, base);
  variants[1].sampling_topk = 5;
  variants[2].sampling_topp = 0.9f;
  variants[3].sampling_temperature = 0.7f;
  variants[4].seed = 1;
  variants[5].has_seed = false;
  for (size_t i = 0; i < variants.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(key(1, 1, variants[i]), key(1, 1, variants[j])) << i << " " << j;
  }
  EXPECT_TRUE(TranslationCache::cacheable(base));
  EXPECT_FALSE(TranslationCache::cacheable(variants[5]));
  EXPECT_TRUE(TranslationCache::cacheable(DecodeOptions{}));  // beam search
}

TEST(TranslationCache, StaysWithinItsBytesEvictingTheLeastRecentlyUsed) {
  TranslationCache probe(1 << 20);
  probe.insert("m", 1, key(0), translation("x", 0));
  const size_t one = probe.bytes();
  ASSERT_GT(one, 0u);
  TranslationCache cache(3 * one);  // room for three entries
  for (int s = 1; s <= 3; ++s) cache.insert("m", 1, key(s), translation("x", 0));
  EXPECT_EQ(cache.entries(), 3u);
  ASSERT_TRUE(cache.find("m", 1, key(1)));  // 1 is now the most recently used: 2 goes first
  cache.insert("m", 1, key(4), translation("x", 0));
  EXPECT_EQ(cache.entries(), 3u);
  EXPECT_LE(cache.bytes(), 3 * one);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_FALSE(cache.find("m", 1, key(2)));
  EXPECT_TRUE(cache.find("m", 1, key(1)));
  EXPECT_TRUE(cache.find("m", 1, key(3)));
  EXPECT_TRUE(cache.find("m", 1, key(4)));
  // An entry larger than the whole bound is not kept (and evicts nothing).
  cache.insert("m", 1, key(5), translation(std::string(4 * one, 'y'), 0));
  EXPECT_FALSE(cache.find("m", 1, key(5)));
  EXPECT_EQ(cache.entries(), 3u);
}

TEST(TranslationCache, ANewerVersionOfAModelDropsTheOlderOnesEntries) {
  TranslationCache cache(1 << 20);
  cache.insert("m", 1, key(1, 1), translation("old", -1));
  cache.insert("other", 2, key(1, 2), translation("other", -1));
  EXPECT_EQ(cache.entries(), 2u);
  // The model reloaded (generation 3): the old version's entries go at once, not by LRU.
  EXPECT_FALSE(cache.find("m", 3, key(1, 3)));
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.evictions(), 0u) << "invalidation is no eviction";
  // A request of the old version finishing late does not put it back.
  cache.insert("m", 1, key(1, 1), translation("old", -1));
  EXPECT_FALSE(cache.find("m", 1, key(1, 1)));
  EXPECT_TRUE(cache.find("other", 2, key(1, 2)));
}

TEST(TranslationCache, ZeroBytesKeepsNothing) {
  TranslationCache cache(0);
  EXPECT_FALSE(cache.enabled());
  cache.insert("m", 1, key(1), translation("x", 0));
  EXPECT_FALSE(cache.find("m", 1, key(1)));
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace

// Repetition controls: each changes the output, so each changes the key; sequences are
// length-prefixed ({1, 2} and {1}, {2} differ).
TEST(TranslationCache, RepetitionControlsArePartOfTheKey) {
  std::vector<DecodeOptions> variants(6);
  variants[1].no_repeat_ngram_size = 3;
  variants[2].repetition_penalty = 1.2f;
  variants[3].suppress_sequences = {{5}};
  variants[4].suppress_sequences = {{5, 6}};
  variants[5].suppress_sequences = {{5}, {6}};
  for (size_t i = 0; i < variants.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(key(1, 1, variants[i]), key(1, 1, variants[j])) << i << " " << j;
  }
}
