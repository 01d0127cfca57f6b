// nmt-translate as a user runs it: stdin in, translations out, one-line errors.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"

namespace {

struct Result {
  std::string out;
  int status;
};

Result sh(const std::string& cmd) {
  Result r{"", -1};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  r.status = ::pclose(p);
  return r;
}

const std::string kBin = NMT_TRANSLATE_BIN;

}  // namespace

TEST(TranslateCli, TranslatesStdinLikeTransformers) {
  const auto golden = nmt::test::load_references(nmt::test::demo_references_path());
  ASSERT_GE(golden.size(), 5u);
  const std::string input = "/tmp/nmt-cli-input-" + std::to_string(::getpid());
  {
    std::ofstream f(input);
    for (int i = 0; i < 5; ++i) f << golden[size_t(i)].source << "\n";
  }
  const Result r = sh(kBin + " --beam 4 < " + input + " 2>/dev/null");
  std::remove(input.c_str());
  ASSERT_EQ(r.status, 0);
  std::string expected;
  for (int i = 0; i < 5; ++i) expected += golden[size_t(i)].beam4.text + "\n";
  EXPECT_EQ(r.out, expected);
}

// A multilingual-target model: the language code at the start of the line is the first
// source token, as MarianTokenizer makes it, and the output is transformers' for that code.
TEST(TranslateCli, LanguageCodeInTheTextLikeTransformers) {
  const std::string dir = nmt::test::conformance_dir() + "/models/multilingual_target";
  const auto refs = nmt::test::load_references(dir + "/references.jsonl");
  ASSERT_GE(refs.size(), 4u);
  const std::string input = "/tmp/nmt-cli-lang-" + std::to_string(::getpid());
  std::string expected;
  {
    std::ofstream f(input);
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(refs[i].source.rfind(">>", 0), 0u) << refs[i].source;
      f << refs[i].source << "\n";
      expected += refs[i].beam4.text + "\n";
    }
  }
  const int max_len = nmt::test::reference_max_decoding_length(dir + "/references.jsonl");
  const Result r = sh(kBin + " --model " + dir + " --beam 4 --max-length " + std::to_string(max_len) + " < " + input +
                      " 2>/dev/null");
  std::remove(input.c_str());
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, expected);
}

TEST(TranslateCli, QuickstartSentenceGivesGermanLine) {
  const Result r = sh("echo 'A man is riding a bike.' | " + kBin + " 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  EXPECT_NE(r.out.find("Mann"), std::string::npos) << r.out;  // "man" in German
}

// A line is a text: split into sentences by default (the model stops at a sentence's end), each
// translated, joined with the line's own whitespace; --no-split-sentences sends it whole.
TEST(TranslateCli, TranslatesEachLineWholeSentenceBySentence) {
  const Result each = sh("printf 'Two dogs play in the snow.\\nA man is riding a bike.\\n' | " + kBin +
                         " --no-split-sentences 2>/dev/null");
  ASSERT_EQ(each.status, 0);
  const size_t cut = each.out.find('\n');
  ASSERT_NE(cut, std::string::npos);
  const std::string first = each.out.substr(0, cut), second = each.out.substr(cut + 1, each.out.size() - cut - 2);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  const Result whole = sh("printf 'Two dogs play in the snow. A man is riding a bike.\\n "
                          " Two dogs play in the snow.  A man is riding a bike.\\n' | " + kBin + " 2>/dev/null");
  ASSERT_EQ(whole.status, 0);
  EXPECT_EQ(whole.out, first + " " + second + "\n  " + first + "  " + second + "\n");
  const Result unsplit = sh("echo 'Two dogs play in the snow. A man is riding a bike.' | " + kBin +
                            " --no-split-sentences 2>/dev/null");
  ASSERT_EQ(unsplit.status, 0);
  EXPECT_NE(unsplit.out, first + " " + second + "\n") << "the demo model stops at the first full stop";
  // n-best and scores are one sentence's lists: a line of two is refused, named.
  const Result nbest = sh("echo 'Two dogs play. A man runs.' | " + kBin + " --num-hypotheses 2 2>&1 >/dev/null");
  EXPECT_NE(nbest.status, 0);
  EXPECT_EQ(nbest.out.rfind("nmt-translate: error: input line 1 has 2 sentences", 0), 0u) << nbest.out;
}

// A bilingual model's own pair, named as a FLORES-200 code or an ISO 639-1 alias, changes nothing.
TEST(TranslateCli, BilingualModelTakesItsOwnLanguages) {
  const Result plain = sh("echo 'A man is riding a bike.' | " + kBin + " 2>/dev/null");
  ASSERT_EQ(plain.status, 0);
  for (const std::string flags : {"--source-language en --target-language de", "--source-language eng_Latn --target-language deu_Latn"}) {
    const Result r = sh("echo 'A man is riding a bike.' | " + kBin + " " + flags + " 2>/dev/null");
    EXPECT_EQ(r.status, 0) << flags;
    EXPECT_EQ(r.out, plain.out) << flags;
  }
}

// A multilingual model (the generated NLLB-200 family): --source-language / --target-language
// (here by ISO 639-1 alias) pick the pair; the output is transformers' for it.
TEST(TranslateCli, LanguageFlagsOnAMultilingualModel) {
  const std::string dir = nmt::test::conformance_dir() + "/families/nllb";
  std::ifstream refs(dir + "/references.jsonl");
  ASSERT_TRUE(refs) << dir;
  const std::string input = "/tmp/nmt-cli-nllb-" + std::to_string(::getpid());
  std::string expected;
  {
    std::ofstream f(input);
    int n = 0;
    for (std::string line; n < 4 && std::getline(refs, line);) {
      const auto r = nlohmann::json::parse(line);
      if (r["source_language"] != "eng_Latn" || r["target_language"] != "deu_Latn") continue;
      f << r["source"].get<std::string>() << "\n";
      expected += r["beam4"]["text"].get<std::string>() + "\n";
      ++n;
    }
    ASSERT_EQ(n, 4);
  }
  const int max_len = nmt::test::reference_max_decoding_length(dir + "/references.jsonl");
  const std::string cmd = kBin + " --model " + dir + " --beam 4 --max-length " + std::to_string(max_len) +
                          " --source-language en --target-language de < " + input;
  const Result r = sh(cmd + " 2>/dev/null");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, expected);
  // Without a target the model (no forced_bos_token_id) cannot choose one.
  const Result none = sh(kBin + " --model " + dir + " < " + input + " 2>&1 >/dev/null");
  std::remove(input.c_str());
  EXPECT_NE(none.status, 0);
  EXPECT_EQ(none.out.rfind("nmt-translate: error: target_language is required", 0), 0u) << none.out;
}

TEST(TranslateCli, NBestAndScoresFormats) {
  Result r = sh("echo 'Two dogs play.' | " + kBin + " --num-hypotheses 3 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3);
  EXPECT_EQ(r.out.rfind("0 ||| ", 0), 0u) << r.out;
  r = sh("echo 'Two dogs play.' | " + kBin + " --scores 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out[0], '-') << "a log-probability score comes first: " << r.out;
}

// --alignments: the text, then a source-target token index pair per target token (EOS too).
TEST(TranslateCli, AlignmentsInPharaohFormat) {
  const Result r = sh("echo 'A dog runs across the yard.' | " + kBin + " --alignments --quiet 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "Ein Hund rennt über den Hof. ||| 0-0 1-1 2-2 3-3 4-4 5-5 7-6 7-7\n");
}

// Sampling flags: a seed reproduces (two equal lines of one run draw alike), another seed
// draws differently, --sampling-topk 1 is the search of --beam (greedy at 1), the n samples
// print as an n-best list, a bad value is refused naming the option.
TEST(TranslateCli, SamplingFlags) {
  const std::string line = "Two dogs play in the deep snow near a red house.";
  const std::string twice = "printf '" + line + "\\n" + line + "\\n' | " + kBin;
  const std::string once = "echo '" + line + "' | " + kBin;
  const std::string sampled = " --sampling-topk 0 --sampling-temperature 1.5 --seed ";
  const Result a = sh(twice + sampled + "5 2>/dev/null");
  ASSERT_EQ(a.status, 0);
  const size_t first_end = a.out.find('\n') + 1;
  ASSERT_EQ(std::count(a.out.begin(), a.out.end(), '\n'), 2) << a.out;
  EXPECT_EQ(a.out.substr(0, first_end), a.out.substr(first_end)) << "one seed, one draw";
  EXPECT_NE(sh(once + sampled + "6 2>/dev/null").out, a.out.substr(0, first_end)) << "seeds 5 and 6 drew alike";
  EXPECT_EQ(sh(once + " --beam 1 --sampling-topk 1 --seed 3 2>/dev/null").out, sh(once + " --beam 1 2>/dev/null").out);
  const Result n = sh(once + " --sampling-topk 10 --num-hypotheses 3 --seed 1 2>/dev/null");
  ASSERT_EQ(n.status, 0);
  EXPECT_EQ(std::count(n.out.begin(), n.out.end(), '\n'), 3) << n.out;
  const Result bad = sh(once + " --sampling-topk 5 --sampling-topp 1.5 2>&1 >/dev/null");
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.out, "nmt-translate: error: sampling_topp must be in (0, 1], got 1.5\n");
  const Result beam = sh(once + " --sampling-topk 5 --beam 4 2>&1 >/dev/null");
  EXPECT_NE(beam.status, 0);
  EXPECT_NE(beam.out.find("beam_size must be 1 when sampling"), std::string::npos) << beam.out;
}

TEST(TranslateCli, ErrorsExitNonZeroWithOneLine) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--model /nonexistent", "nmt-translate: error: /nonexistent/config.json: cannot open model config (missing file?)\n"},
      {"--beam 0", "nmt-translate: error: beam_size must be between 1 and 1024, got 0\n"},
      {"--num-hypotheses 9", "nmt-translate: error: num_hypotheses must be between 1 and beam_size (4), got 9\n"},
      {"--input /nonexistent.txt", "nmt-translate: error: /nonexistent.txt: cannot open input file\n"},
      // The demo model translates en -> de only (its tokenizer_config.json says so).
      {"--target-language fra_Latn",
       "nmt-translate: error: target_language 'fra_Latn' is not this model's: its target language is de\n"},
      {"--source-language de", "nmt-translate: error: source_language 'de' is not this model's: its source language is en\n"},
  };
  for (const auto& c : cases) {
    const Result r = sh("echo hi | " + kBin + " " + c.args + " 2>&1 >/dev/null");
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_EQ(r.out, c.message) << c.args;
  }
  const Result bad = sh("echo hi | " + kBin + " --bogus 1 2>&1 >/dev/null");
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.out.rfind("nmt-translate: unknown option --bogus\n", 0), 0u) << bad.out;
  const Result empty = sh("printf 'a\\n\\nb\\n' | " + kBin + " 2>&1 >/dev/null");
  EXPECT_NE(empty.status, 0);
  EXPECT_EQ(empty.out, "nmt-translate: error: input line 2 is empty\n");
}

// --target-prefix: every line's translation continues it; --score: 'SOURCE ||| TARGET' lines
// give the target's score, the own translation's the --scores one.
TEST(TranslateCli, TargetPrefixAndScore) {
  Result r = sh("echo 'Two dogs play in the snow.' | " + kBin + " --target-prefix 'Zwei Katzen' 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("Zwei Katzen", 0), 0u) << r.out;
  const Result scored = sh("echo 'Two dogs play in the snow.' | " + kBin + " --scores 2>/dev/null");
  ASSERT_EQ(scored.status, 0);
  const size_t bar = scored.out.find(" ||| ");
  ASSERT_NE(bar, std::string::npos) << scored.out;
  const std::string text = scored.out.substr(bar + 5, scored.out.find('\n') - bar - 5);
  r = sh("echo 'Two dogs play in the snow. ||| " + text + "' | " + kBin + " --score 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  EXPECT_NEAR(std::stod(r.out), std::stod(scored.out), 1e-4) << r.out << " vs " << scored.out;
  r = sh("echo 'no bars here' | " + kBin + " --score 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("SOURCE ||| TARGET"), std::string::npos) << r.out;
}

// --glossary: the line whose sentence holds the source term gets the target term, the other
// line is the plain translation; a malformed file is refused naming --glossary.
TEST(TranslateCli, Glossary) {
  const std::string file = "/tmp/nmt-cli-glossary-" + std::to_string(::getpid()) + ".tsv";
  {
    std::ofstream f(file);
    f << "# terms\npark\tGrünanlage\n";
  }
  const std::string input = "printf 'Two men are playing chess in the park.\\nA dog runs across the yard.\\n' | ";
  const Result plain = sh(input + kBin + " 2>/dev/null");
  const Result r = sh(input + kBin + " --glossary " + file + " 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  ASSERT_EQ(plain.status, 0);
  const size_t nl = r.out.find('\n');
  EXPECT_NE(r.out.substr(0, nl).find("Grünanlage"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(nl), plain.out.substr(plain.out.find('\n'))) << "the line without the term is as without a glossary";
  {
    std::ofstream f(file);
    f << "park Grünanlage\n";
  }
  const Result bad = sh(input + kBin + " --glossary " + file + " 2>&1");
  std::remove(file.c_str());
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--glossary: " + file + ":1: expected source<TAB>target"), std::string::npos) << bad.out;
}
