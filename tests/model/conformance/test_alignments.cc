// return_alignments on the CPU engine: transformers' cross-attention argmax per token
// (tests/support/conformance/alignment_references.h), the byte ranges of the tokens in the texts, and a
// sentence that asks sharing decode steps with one that does not, each as it is alone.
#include <gtest/gtest.h>

#include <cctype>
#include <map>

#include "model/decoding/decode_loop.h"
#include "model/translator.h"
#include "tests/support/conformance/alignment_references.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

std::unique_ptr<Translator> demo() {
  TranslatorOptions o;
  o.device = Device::kCpu;
  o.precision = Precision::kFloat32;
  return Translator::load(test::demo_model_dir(), o);
}

std::string without_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  }
  return out;
}

}  // namespace

TEST(Alignments, ArgmaxEqualsTransformersCrossAttention) {
  const test::AlignmentTally t = test::compare_alignments(Device::kCpu);
  EXPECT_GT(t.tokens, 500);
  EXPECT_EQ(t.ids_differ, 0) << t.first_difference;
  EXPECT_EQ(t.differ, 0) << t.first_difference;
  EXPECT_EQ(t.identical + t.ties, t.tokens);
}

TEST(Alignments, ByteRangesCoverTheTexts) {
  auto tr = demo();
  const std::string source = "Two dogs play in the snow.";
  for (int beam : {1, 4}) {
    DecodeOptions opt;
    opt.beam_size = beam;
    opt.return_alignments = true;
    const Hypothesis h = tr->translate({source}, opt).at(0).hypotheses.at(0);
    ASSERT_EQ(h.alignments.size(), h.ids.size());
    const std::vector<int> source_ids = tr->encode_source(source);
    std::string target_pieces;
    size_t last_end = 0;
    for (size_t i = 0; i < h.alignments.size(); ++i) {
      const TokenAlignment& a = h.alignments[i];
      EXPECT_EQ(a.target_token, int(i));
      ASSERT_GE(a.source_token, 0);
      ASSERT_LT(a.source_token, int(source_ids.size()));
      EXPECT_LE(a.source_begin, a.source_end);
      EXPECT_LE(a.source_end, source.size());
      EXPECT_LE(a.target_begin, a.target_end);
      EXPECT_LE(a.target_end, h.text.size());
      EXPECT_GE(a.target_begin, last_end);  // in order, not overlapping
      last_end = a.target_end;
      target_pieces += h.text.substr(a.target_begin, a.target_end - a.target_begin);
    }
    // Every character of the translation but its spaces is in exactly one token's range.
    EXPECT_EQ(target_pieces, without_spaces(h.text)) << h.text;
    // The EOS token has no text: an empty range at the end.
    EXPECT_EQ(h.alignments.back().target_begin, h.alignments.back().target_end);
  }
  // The source side: the tokens' ranges tile the text but for its spaces; </s> is empty.
  const std::vector<TextSpan> spans = tr->tokenizer().source_spans(source);
  ASSERT_EQ(spans.size(), tr->encode_source(source).size());
  std::string pieces;
  for (const TextSpan& s : spans) pieces += source.substr(s.begin, s.end - s.begin);
  EXPECT_EQ(pieces, without_spaces(source));
  EXPECT_EQ(spans.back().begin, spans.back().end);
  EXPECT_EQ(source.substr(spans[0].begin, spans[0].end - spans[0].begin).substr(0, 2), "Tw");
}

TEST(Alignments, OnlyTheAskingSentenceGetsThemAndBothTranslateAsAlone) {
  auto tr = demo();
  const std::vector<int> a = tr->encode_source("A man is riding a bike."), b = tr->encode_source("Two dogs play.");
  DecodeOptions plain;
  DecodeOptions asking = plain;
  asking.return_alignments = true;
  const Translation alone_a = tr->translate_ids({a}, asking).at(0), alone_b = tr->translate_ids({b}, plain).at(0);
  ASSERT_FALSE(alone_a.hypotheses[0].alignments.empty());
  EXPECT_TRUE(alone_b.hypotheses[0].alignments.empty());
  for (int follow : {0, 1}) {  // the CPU engine never overlaps steps; the loop's setting must not matter
    auto loop = tr->make_loop({2, 8, 32});
    loop->set_follow_rows(follow);
    loop->admit({{1, a, asking}, {2, b, plain}});
    std::map<uint64_t, Translation> got;
    while (!loop->idle()) {
      for (FinishedSentence& f : loop->step().finished) got[f.id] = f.translation;
    }
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].hypotheses[0].ids, alone_a.hypotheses[0].ids);
    EXPECT_EQ(got[1].hypotheses[0].score, alone_a.hypotheses[0].score);
    ASSERT_EQ(got[1].hypotheses[0].alignments.size(), alone_a.hypotheses[0].alignments.size());
    for (size_t i = 0; i < got[1].hypotheses[0].alignments.size(); ++i)
      EXPECT_EQ(got[1].hypotheses[0].alignments[i].source_token, alone_a.hypotheses[0].alignments[i].source_token);
    EXPECT_EQ(got[2].hypotheses[0].ids, alone_b.hypotheses[0].ids);
    EXPECT_TRUE(got[2].hypotheses[0].alignments.empty());
  }
}

// The demo model is trained: its alignments must be about right, not only transformers'. The
// German "Hund" of "Ein Hund rennt" aligns to "dog".
TEST(Alignments, TrainedModelAlignsWords) {
  auto tr = demo();
  const std::string source = "A dog runs across the yard.";
  DecodeOptions opt;
  opt.return_alignments = true;
  const Hypothesis h = tr->translate({source}, opt).at(0).hypotheses.at(0);
  bool found = false;
  for (const TokenAlignment& a : h.alignments) {
    if (h.text.substr(a.target_begin, a.target_end - a.target_begin) != "Hund") continue;
    found = true;
    EXPECT_EQ(source.substr(a.source_begin, a.source_end - a.source_begin), "dog") << h.text;
  }
  EXPECT_TRUE(found) << h.text;
}

// The fairseq tokenizers' source ranges (NLLB-200: the language token first, empty): they tile
// the text but for its spaces, as Marian's do, for every family folder.
TEST(Alignments, FamilySourceRangesTileTheText) {
  for (const char* family : {"nllb", "nllb_legacy", "m2m100", "mbart50"}) {
    TranslatorOptions o;
    o.device = Device::kCpu;
    o.precision = Precision::kFloat32;
    auto tr = Translator::load(test::conformance_dir() + "/families/" + family, o);
    const std::string source = "A dog runs across the yard.";
    const std::vector<TextSpan> spans = tr->tokenizer().source_spans(source);
    ASSERT_EQ(spans.size(), tr->encode_source(source).size()) << family;
    std::string pieces;
    size_t last = 0;
    for (const TextSpan& s : spans) {
      ASSERT_LE(s.begin, s.end) << family;
      ASSERT_LE(s.end, source.size()) << family;
      if (s.end > s.begin) {
        EXPECT_GE(s.begin, last) << family << ": in order";
        last = s.end;
      }
      pieces += source.substr(s.begin, s.end - s.begin);
    }
    EXPECT_EQ(pieces, without_spaces(source)) << family;
  }
}
