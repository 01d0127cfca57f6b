// Request validation: each bad input is refused with INVALID_ARGUMENT and a message that
// names the sentence or option; defaults are filled in for unset options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "model/error.h"
#include "server/pipeline/request_validator.h"

using namespace nmt::server;
using nmt::Error;
using nmt::SentenceSplitter;
using nmt::ErrorCode;

namespace {

Limits limits() {
  Limits l;
  l.max_characters_per_request = 100;
  l.split_sentences = false;  // the tests below set it where they split
  l.max_input_tokens = 10;
  l.max_beam_size = 8;
  l.max_decoding_length = 100;
  return l;
}

// The message of the kInvalidArgument error `f` throws, or a marker.
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) return "(wrong code)";
    return e.what();
  }
  return "(accepted)";
}

std::string options_refusal(const std::function<void(nmt::v1::TranslateOptions&)>& set) {
  nmt::v1::TranslateOptions o;
  set(o);
  return refusal([&] { RequestValidator(limits()).decode_options(o); });
}

}  // namespace

TEST(Validation, GoodTextsPass) {
  RequestValidator v(limits());
  EXPECT_NO_THROW(v.check_texts({"A man.", "Zwei Hunde — ÿ 😀"}));
  EXPECT_NO_THROW(v.check_length(0, 10));
}

TEST(Validation, TextErrors) {
  RequestValidator v(limits());
  EXPECT_EQ(refusal([&] { v.check_texts({}); }), "texts is empty: send at least one sentence");
  // Characters of all the texts together, as code points (LibreTranslate's char_limit).
  const std::string fifty(50, 'a');
  EXPECT_EQ(refusal([&] { v.check_texts({fifty, std::string(49, 'b') + "\xc3\xbf"}); }), "(accepted)");
  EXPECT_EQ(refusal([&] { v.check_texts({fifty, fifty + "c"}); }),
            "the texts have 101 characters, more than limits.max_characters_per_request (100); "
            "send the text in several requests");
  EXPECT_EQ(refusal([&] { v.check_texts({"a", ""}); }), "texts[1] is empty (or only whitespace)");
  EXPECT_EQ(refusal([&] { v.check_texts({" \t\n"}); }), "texts[0] is empty (or only whitespace)");
  EXPECT_EQ(refusal([&] { v.check_texts({"ok", "ab\xff"}); }),
            "texts[1] is not valid UTF-8 (invalid byte sequence at offset 2)");
  EXPECT_EQ(refusal([&] { v.check_length(2, 11); }),
            "texts[2] has 11 tokens, more than limits.max_input_tokens (10); split it into "
            "shorter sentences (input is never truncated)");
}

TEST(Validation, Utf8Decoder) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("Stra\xc3\x9f" "e \xe2\x82\xac \xf0\x9f\x98\x80"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("a\xc3"), 1u);              // truncated sequence
  EXPECT_EQ(find_invalid_utf8("a\x80"), 1u);              // lone continuation byte
  EXPECT_EQ(find_invalid_utf8("\xc0\xaf"), 0u);           // overlong '/'
  EXPECT_EQ(find_invalid_utf8("x\xed\xa0\x80"), 1u);      // UTF-16 surrogate
  EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);   // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ok\xe2\x82"), 2u);
}

TEST(Validation, DefaultsFillUnsetOptions) {
  const nmt::DecodeOptions o = RequestValidator(limits()).decode_options({});
  EXPECT_EQ(o.beam_size, 4);
  EXPECT_EQ(o.num_hypotheses, 1);
  EXPECT_FLOAT_EQ(o.length_penalty, 1.0f);
  EXPECT_EQ(o.max_decoding_length, 100);  // min(255, limits.max_decoding_length)
  EXPECT_EQ(o.min_decoding_length, 0);
  Limits wide = limits();
  wide.max_decoding_length = 512;
  EXPECT_EQ(RequestValidator(wide).decode_options({}).max_decoding_length, 255);
}

TEST(Validation, RequestedOptionsAreKept) {
  nmt::v1::TranslateOptions r;
  r.set_beam_size(8);
  r.set_num_hypotheses(8);
  r.set_length_penalty(0.6f);
  r.set_max_decoding_length(50);
  r.set_min_decoding_length(49);
  r.set_return_scores(true);
  const nmt::DecodeOptions o = RequestValidator(limits()).decode_options(r);
  EXPECT_EQ(o.beam_size, 8);
  EXPECT_EQ(o.num_hypotheses, 8);
  EXPECT_FLOAT_EQ(o.length_penalty, 0.6f);
  EXPECT_EQ(o.max_decoding_length, 50);
  EXPECT_EQ(o.min_decoding_length, 49);
  EXPECT_TRUE(o.return_scores);
}

TEST(Validation, OptionErrors) {
  using O = nmt::v1::TranslateOptions;
  EXPECT_EQ(options_refusal([](O& o) { o.set_beam_size(0); }),
            "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 0");
  EXPECT_EQ(options_refusal([](O& o) { o.set_beam_size(9); }),
            "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 9");
  EXPECT_EQ(options_refusal([](O& o) { o.set_beam_size(2); o.set_num_hypotheses(3); }),
            "options.num_hypotheses must be between 1 and 2 (options.beam_size), got 3");
  EXPECT_EQ(options_refusal([](O& o) { o.set_num_hypotheses(0); }),
            "options.num_hypotheses must be between 1 and 4 (options.beam_size), got 0");
  EXPECT_EQ(options_refusal([](O& o) { o.set_length_penalty(NAN); }),
            "options.length_penalty must be a finite number, got nan");
  EXPECT_EQ(options_refusal([](O& o) { o.set_max_decoding_length(0); }),
            "options.max_decoding_length must be between 1 and 100 (limits.max_decoding_length), got 0");
  EXPECT_EQ(options_refusal([](O& o) { o.set_max_decoding_length(101); }),
            "options.max_decoding_length must be between 1 and 100 (limits.max_decoding_length), got 101");
  EXPECT_EQ(options_refusal([](O& o) { o.set_max_decoding_length(10); o.set_min_decoding_length(10); }),
            "options.min_decoding_length must be between 0 and 9 (options.max_decoding_length - 1), got 10");
  EXPECT_EQ(options_refusal([](O& o) { o.set_min_decoding_length(-1); }),
            "options.min_decoding_length must be between 0 and 99 (options.max_decoding_length - 1), got -1");
}

// A request_id is echoed as gRPC metadata, where a control character makes gRPC abort the
// process (found by tests/reliability: "a\n..." crashed the server).
// Sampling: CTranslate2's defaults (top-k 1: greedy), the beam defaulting to 1 when sampling,
// num_hypotheses as samples up to limits.max_beam_size, each bad value named.
TEST(Validation, SamplingOptions) {
  using O = nmt::v1::TranslateOptions;
  RequestValidator v(limits());
  O o;
  nmt::DecodeOptions d = v.decode_options(o);
  EXPECT_FALSE(d.samples());
  EXPECT_EQ(d.sampling_topk, 1);
  EXPECT_EQ(d.sampling_topp, 1.f);
  EXPECT_EQ(d.sampling_temperature, 1.f);
  EXPECT_FALSE(d.has_seed);
  o.set_sampling_topk(0);
  o.set_sampling_topp(0.9f);
  o.set_sampling_temperature(0.7f);
  o.set_seed(0);  // an explicit 0 is a seed
  o.set_num_hypotheses(8);
  d = v.decode_options(o);
  EXPECT_TRUE(d.samples());
  EXPECT_EQ(d.beam_size, 1);
  EXPECT_EQ(d.rows(), 8);
  EXPECT_TRUE(d.has_seed);
  EXPECT_EQ(d.sampling_topp, 0.9f);
  o.set_sampling_temperature(0.f);  // greedy: beam search's rules again
  EXPECT_EQ(refusal([&] { v.decode_options(o); }),
            "options.num_hypotheses must be between 1 and 4 (options.beam_size), got 8");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_topk(-2); }),
            "options.sampling_topk must be >= 0 (0: the whole vocabulary, 1: greedy), got -2");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_topp(0.f); }), "options.sampling_topp must be in (0, 1], got 0");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_topp(1.5f); }), "options.sampling_topp must be in (0, 1], got 1.5");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_temperature(-1.f); }),
            "options.sampling_temperature must be a finite number >= 0 (0: greedy), got -1");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_temperature(INFINITY); }),
            "options.sampling_temperature must be a finite number >= 0 (0: greedy), got inf");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_topk(5); x.set_beam_size(4); }),
            "options.beam_size must be 1 when sampling (sampling_topk != 1 and sampling_temperature > 0), got 4: "
            "num_hypotheses gives independent samples");
  EXPECT_EQ(options_refusal([](O& x) { x.set_sampling_topk(5); x.set_num_hypotheses(9); }),
            "options.num_hypotheses must be between 1 and 8 (limits.max_beam_size: the samples take a cache row "
            "each), got 9");
}

TEST(Validation, RequestIdMustBeEchoable) {
  EXPECT_TRUE(valid_request_id("req-42_ABC.x:y/z"));
  EXPECT_TRUE(valid_request_id(std::string(kMaxRequestIdBytes, 'a')));
  EXPECT_FALSE(valid_request_id(""));
  EXPECT_FALSE(valid_request_id(std::string(kMaxRequestIdBytes + 1, 'a')));
  EXPECT_FALSE(valid_request_id("a\nb"));
  EXPECT_FALSE(valid_request_id(std::string("a\0b", 3)));
  EXPECT_FALSE(valid_request_id("\x7f"));
  EXPECT_FALSE(valid_request_id("\xc3\x9c"));  // U+00DC: UTF-8, but not ASCII

  const RequestValidator v(limits());
  auto tokenize = [](const std::string& text) { return std::vector<int>(text.size() % 5 + 1, 7); };
  nmt::v1::TranslateRequest request;
  request.add_texts("A dog.");
  request.set_request_id("ok-1");
  EXPECT_EQ(refusal([&] { v.validate(request, tokenize); }), "(accepted)");
  request.set_request_id("a\nINJECTED");
  EXPECT_EQ(refusal([&] { v.validate(request, tokenize); }),
            "request_id must be 1 to 128 printable ASCII characters (it is echoed as the "
            "x-request-id metadata)");
}

// split_sentences: sentences are counted and measured, not texts; the server default
// applies when the request leaves the option unset.
TEST(Validation, SplitSentencesChecksEachSentence) {
  // One token per word, plus </s>.
  auto tokenize = [](const std::string& text) {
    return std::vector<int>(size_t(std::count(text.begin(), text.end(), ' ') + 2), 7);
  };
  const SentenceSplitter& splitter = SentenceSplitter::for_language("en");
  auto split = [&](const std::string& text) { return splitter.split(text); };
  const std::string paragraph = "One two three four five. Six seven eight nine ten. Eleven twelve.";
  nmt::v1::TranslateRequest request;
  request.add_texts(paragraph);
  const RequestValidator v(limits());
  EXPECT_EQ(refusal([&] { v.validate(request, tokenize, split); }),
            "texts[0] has 13 tokens, more than limits.max_input_tokens (10); split it into "
            "shorter sentences (input is never truncated)");

  request.mutable_options()->set_split_sentences(true);
  const ValidRequest valid = v.validate(request, tokenize, split);
  ASSERT_EQ(valid.source_ids.size(), 3u);
  EXPECT_EQ(valid.input_tokens, 6 + 6 + 3);
  ASSERT_EQ(valid.split.size(), 1u);
  EXPECT_EQ(valid.split[0].sentences,
            (std::vector<std::string>{"One two three four five.", "Six seven eight nine ten.", "Eleven twelve."}));

  Limits split_by_default = limits();
  split_by_default.split_sentences = true;
  request.mutable_options()->clear_split_sentences();
  EXPECT_EQ(RequestValidator(split_by_default).validate(request, tokenize, split).source_ids.size(), 3u);
  request.mutable_options()->set_split_sentences(false);  // the request's own setting wins
  EXPECT_NE(refusal([&] { RequestValidator(split_by_default).validate(request, tokenize, split); }),
            "(accepted)");

  request.mutable_options()->set_split_sentences(true);
  request.set_texts(0, "Short one. A b c d e f g h i j k l m n o p q r s t u v w x y z und so weiter.");
  EXPECT_EQ(refusal([&] { v.validate(request, tokenize, split); }),
            "texts[0] sentence 1 (\"A b c d e f g h i j k l m n o p q r s t ...\") has 30 tokens, "
            "more than limits.max_input_tokens (10); split it into shorter sentences (input is "
            "never truncated)");
  // Sentences are not counted: a text within the characters limit is served whole.
  request.set_texts(0, "A. B. C. D. E. F.");
  EXPECT_EQ(v.validate(request, tokenize, split).source_ids.size(), 6u);
}

TEST(Validation, CountsCharacters) {
  EXPECT_EQ(count_characters(""), 0u);
  EXPECT_EQ(count_characters("Stra\xc3\x9f" "e \xe2\x82\xac \xf0\x9f\x98\x80"), 10u);
}

TEST(Validation, SplitsByDefault) {
  EXPECT_TRUE(Limits().split_sentences);
  EXPECT_TRUE(RequestValidator(Limits()).splits(nmt::v1::TranslateOptions()));
  nmt::v1::TranslateOptions off;
  off.set_split_sentences(false);
  EXPECT_FALSE(RequestValidator(Limits()).splits(off));
}

// Repetition controls: texts through the target tokenizer, ids and ranges checked against the
// target vocabulary, each refusal naming the field.
TEST(Validation, RepetitionControls) {
  auto tokenize = [](const std::string& text) {
    std::vector<int> ids;
    for (char c : text)
      if (c != ' ') ids.push_back(c - 'a' + 3);
    return ids;
  };
  auto apply = [&](const std::function<void(nmt::v1::TranslateOptions&)>& set) {
    nmt::v1::TranslateOptions o;
    set(o);
    nmt::DecodeOptions d;
    RequestValidator::repetition_controls(o, tokenize, 40, 2, &d);
    return d;
  };
  const nmt::DecodeOptions d = apply([](nmt::v1::TranslateOptions& o) {
    o.set_no_repeat_ngram_size(3);
    o.set_repetition_penalty(1.25f);
    o.add_suppress_sequences("ab");
    o.add_suppress_token_ids(7);
  });
  EXPECT_EQ(d.no_repeat_ngram_size, 3);
  EXPECT_FLOAT_EQ(d.repetition_penalty, 1.25f);
  EXPECT_EQ(d.suppress_sequences, (std::vector<std::vector<int>>{{3, 4}, {7}}));
  EXPECT_FALSE(apply([](nmt::v1::TranslateOptions&) {}).repetition_controls());
  auto refused = [&](const std::function<void(nmt::v1::TranslateOptions&)>& set) {
    return refusal([&] { apply(set); });
  };
  EXPECT_NE(refused([](auto& o) { o.set_no_repeat_ngram_size(-1); }).find("options.no_repeat_ngram_size"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.set_no_repeat_ngram_size(33); }).find("options.no_repeat_ngram_size"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.set_repetition_penalty(0.f); }).find("options.repetition_penalty"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.set_repetition_penalty(INFINITY); }).find("options.repetition_penalty"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.add_suppress_token_ids(40); }).find("options.suppress_token_ids"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.add_suppress_sequences("  "); }).find("options.suppress_sequences[0]"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.add_suppress_token_ids(2); }).find("end-of-sentence"), std::string::npos);
  EXPECT_NE(refused([](auto& o) {
              for (int i = 0; i < 257; ++i) o.add_suppress_token_ids(5);
            }).find("at most 256"),
            std::string::npos);
}
