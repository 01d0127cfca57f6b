// resolve_language: the model's codes, FLORES-200 codes and ISO 639-1 aliases, per family.
#include <gtest/gtest.h>

#include "model/error.h"
#include "model/tokenizer/languages.h"

using namespace nmt;

namespace {

const std::vector<std::string> kNllb = {"arb_Arab", "arz_Arab", "deu_Latn", "eng_Latn", "kas_Arab", "kas_Deva",
                                        "nob_Latn", "nno_Latn", "yue_Hant", "zho_Hans", "zho_Hant"};
const std::vector<std::string> kM2M = {"ast", "de", "en", "no", "ns", "sr", "zh"};
const std::vector<std::string> kMBart = {"de_DE", "en_XX", "pt_XX", "zh_CN"};

// The refusal's message; fails the test when there is none or it is not kInvalidArgument.
std::string refusal(const std::string& requested, const std::vector<std::string>& codes) {
  try {
    const std::string got = resolve_language(requested, codes);
    ADD_FAILURE() << "'" << requested << "' resolved to '" << got << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ResolveLanguage, Nllb) {
  const std::pair<const char*, const char*> kCases[] = {
      {"deu_Latn", "deu_Latn"}, {"DEU_LATN", "deu_Latn"}, {"de", "deu_Latn"}, {"DE", "deu_Latn"},
      {"deu", "deu_Latn"}, {"de-DE", "deu_Latn"}, {"de_AT", "deu_Latn"},
      {"zh-Hant", "zho_Hant"}, {"zh_Hans", "zho_Hans"}, {"zh-TW", "zho_Hant"}, {"zh-CN", "zho_Hans"},
      {"ar", "arb_Arab"},  // Modern Standard Arabic, not the dialects
      {"arz", "arz_Arab"}, {"nb", "nob_Latn"}, {"no", "nob_Latn"}, {"nn", "nno_Latn"}, {"yue", "yue_Hant"}};
  for (const auto& [asked, want] : kCases) EXPECT_EQ(resolve_language(asked, kNllb), want) << asked;
}

TEST(ResolveLanguage, AmbiguousAliasesNameEveryCandidate) {
  const std::string zh = refusal("zh", kNllb);
  EXPECT_NE(zh.find("'zh' is ambiguous"), std::string::npos) << zh;
  EXPECT_NE(zh.find("zho_Hans and zho_Hant"), std::string::npos) << zh;
  EXPECT_EQ(zh.find("yue_Hant"), std::string::npos) << zh;  // Cantonese is another language
  EXPECT_NE(refusal("ks", kNllb).find("kas_Arab and kas_Deva"), std::string::npos);
  EXPECT_NE(refusal("zh-DE", kNllb).find("zho_Hans and zho_Hant"), std::string::npos);  // a region that names no script
}

TEST(ResolveLanguage, M2M100FromFloresAndIso) {
  const std::pair<const char*, const char*> kCases[] = {
      {"de", "de"}, {"DE", "de"}, {"deu_Latn", "de"}, {"deu", "de"}, {"zho_Hans", "zh"}, {"zh-CN", "zh"},
      {"nob_Latn", "no"}, {"nb", "no"}, {"nso_Latn", "ns"}, {"ast_Latn", "ast"}, {"srp_Cyrl", "sr"}, {"eng", "en"}};
  for (const auto& [asked, want] : kCases) EXPECT_EQ(resolve_language(asked, kM2M), want) << asked;
  // Another script is not the language M2M-100's code stands for.
  EXPECT_NE(refusal("zho_Hant", kM2M).find("'zho_Hant' is not one of this model's languages"), std::string::npos);
  EXPECT_FALSE(refusal("srp_Latn", kM2M).empty());
  EXPECT_FALSE(refusal("zh-TW", kM2M).empty());
}

TEST(ResolveLanguage, MBart50FromFloresAndIso) {
  const std::pair<const char*, const char*> kCases[] = {
      {"de_DE", "de_DE"}, {"EN_xx", "en_XX"}, {"de", "de_DE"}, {"deu_Latn", "de_DE"}, {"pt-BR", "pt_XX"},
      {"por_Latn", "pt_XX"}, {"zh", "zh_CN"}, {"zho_Hans", "zh_CN"}};
  for (const auto& [asked, want] : kCases) EXPECT_EQ(resolve_language(asked, kMBart), want) << asked;
}

TEST(ResolveLanguage, UnknownNamesTheRequestAndListsTheModels) {
  const std::string e = refusal("fr", kMBart);
  EXPECT_NE(e.find("'fr'"), std::string::npos) << e;
  EXPECT_NE(e.find("de_DE, en_XX, pt_XX, zh_CN"), std::string::npos) << e;
  for (const char* junk : {"", "x", "fra_", "_Latn", "1234", "klingon", "de--DE"}) {
    EXPECT_FALSE(refusal(junk, kMBart).empty()) << junk;
  }
  EXPECT_NE(refusal("de", {}).find("without language codes"), std::string::npos);
}

TEST(DescribeLanguage, CodesOfEachFamily) {
  const struct {
    const char* code;
    LanguageInfo want;
  } kCases[] = {
      {"deu_Latn", {"de", "deu", "Latn", "German"}},  {"de_DE", {"de", "deu", "Latn", "German"}},
      {"de", {"de", "deu", "Latn", "German"}},        {"zho_Hant", {"zh", "zho", "Hant", "Chinese"}},
      {"zh_CN", {"zh", "zho", "Hans", "Chinese"}},    {"no", {"no", "nob", "Latn", "Norwegian"}},
      {"arz_Arab", {"", "arz", "Arab", "Egyptian Arabic"}}, {"xyz_Latn", {"", "xyz", "Latn", ""}},
  };
  for (const auto& c : kCases) {
    const LanguageInfo got = describe_language(c.code);
    EXPECT_EQ(got.iso639_1, c.want.iso639_1) << c.code;
    EXPECT_EQ(got.iso639_3, c.want.iso639_3) << c.code;
    EXPECT_EQ(got.script, c.want.script) << c.code;
    EXPECT_EQ(got.name, c.want.name) << c.code;
  }
}
