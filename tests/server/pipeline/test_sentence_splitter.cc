// Sentence splitting (ICU) for options.split_sentences: sentences come out trimmed, the
// whitespace around them is kept so that joining gives the text back, the language's
// abbreviations end no sentence; and the language pair of a model folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/pipeline/sentence_splitter.h"
#include "server/repository/model_languages.h"

using namespace nmt::server;
namespace fs = std::filesystem;

TEST(SentenceSplitter, SplitsAndKeepsTheWhitespace) {
  const std::string text =
      "  A man walks. Two dogs play!\tIs it raining?\n\nYes \xe2\x80\x94 it is.  \n";
  const SplitText s = SentenceSplitter::for_language("en").split(text);
  EXPECT_EQ(s.sentences, (std::vector<std::string>{"A man walks.", "Two dogs play!",
                                                   "Is it raining?", "Yes \xe2\x80\x94 it is."}));
  EXPECT_EQ(s.gaps, (std::vector<std::string>{"  ", " ", "\t", "\n\n", "  \n"}));
  EXPECT_EQ(s.join(s.sentences), text);
  EXPECT_EQ(s.join({"1", "2", "3", "4"}), "  1 2\t3\n\n4  \n");
}

TEST(SentenceSplitter, OneSentenceAndNone) {
  const SentenceSplitter& en = SentenceSplitter::for_language("en");
  const SplitText one = en.split("no final stop");
  EXPECT_EQ(one.sentences, std::vector<std::string>{"no final stop"});
  EXPECT_EQ(one.gaps, (std::vector<std::string>{"", ""}));
  const SplitText none = en.split(" \n ");
  EXPECT_TRUE(none.sentences.empty());
  EXPECT_EQ(none.join({}), " \n ");
}

TEST(SentenceSplitter, AbbreviationsOfTheLanguage) {
  EXPECT_EQ(
      SentenceSplitter::for_language("en").split("Mr. Smith is here. He waits.").sentences.size(),
      2u);
  EXPECT_EQ(SentenceSplitter::for_language("de")
                .split("Er kommt z.B. morgen. Sie nicht.")
                .sentences.size(),
            2u);
  // Unknown or no language: ICU's root rules still split sentences.
  EXPECT_EQ(SentenceSplitter::for_language("").split("One. Two.").sentences.size(), 2u);
  EXPECT_EQ(SentenceSplitter::for_language("xx").split("One. Two.").sentences.size(), 2u);
}

TEST(ModelLanguages, FromTheName) {
  auto pair = [](const std::string& name) {
    const ModelLanguages p = languages_in_name(name);
    return p.source + ">" + p.target;
  };
  EXPECT_EQ(pair("opus-mt-en-de"), "en>de");
  EXPECT_EQ(pair("m30k-en-de-small"), "en>de");
  EXPECT_EQ(pair("opus-mt-tc-big-en-fr"), "en>fr");
  EXPECT_EQ(pair("de-en"), "de>en");
  EXPECT_EQ(pair("my_model_fra-eng"), "fra>eng");
  EXPECT_EQ(pair("opus-mt-mul-en"), "mul>en");
  EXPECT_EQ(pair("opus-mt-en"), ">");  // "mt" is no language there
  EXPECT_EQ(pair("m-one"), ">");
  EXPECT_EQ(pair("translator"), ">");
  EXPECT_EQ(pair("m30k"), ">");
}

TEST(ModelLanguages, FromTheFolder) {
  // The demo model names its pair in tokenizer_config.json.
  const ModelLanguages demo =
      model_languages(std::string(NMT_REPO_ROOT) + "/models/m30k-en-de-small", "any");
  EXPECT_EQ(demo.source, "en");
  EXPECT_EQ(demo.target, "de");
  EXPECT_FALSE(demo.multilingual());

  const fs::path dir = fs::temp_directory_path() / ("nmt-languages-" + std::to_string(getpid()));
  fs::create_directories(dir / "opus-mt-fr-es");
  EXPECT_EQ(model_languages((dir / "opus-mt-fr-es").string(), "x").source, "fr");
  EXPECT_EQ(model_languages((dir / "opus-mt-fr-es/").string(), "x").target, "es");
  fs::create_directories(dir / "model");
  EXPECT_EQ(model_languages((dir / "model").string(), "sv-fi").source, "sv");
  EXPECT_FALSE(model_languages((dir / "model").string(), "mine").known_pair());
  std::ofstream(dir / "model" / "tokenizer_config.json")
      << R"({"source_lang": "it", "target_lang": "pt"})";
  EXPECT_EQ(model_languages((dir / "model").string(), "sv-fi").target, "pt");
  fs::remove_all(dir);
}

TEST(ModelLanguages, AMultilingualModelListsItsTokenizersCodes) {
  // fam-gen's NLLB-shaped folder: ten FLORES-200 codes, src_lang eng_Latn, no
  // forced_bos_token_id (no default target); its name's "nllb" says nothing.
  const ModelLanguages nllb =
      model_languages(std::string(NMT_REPO_ROOT) + "/tests/conformance/families/nllb", "nllb-en-de");
  EXPECT_TRUE(nllb.multilingual());
  EXPECT_FALSE(nllb.known_pair());
  EXPECT_EQ(nllb.codes, (std::vector<std::string>{"eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn", "ita_Latn",
                                                  "por_Latn", "rus_Cyrl", "ell_Grek", "zho_Hans", "zho_Hant"}));
  EXPECT_EQ(nllb.source, "eng_Latn");
  EXPECT_EQ(nllb.target, "");

  // A multilingual folder whose tokenizer does not load lists nothing (its load says why),
  // and does not fall back on its name.
  const fs::path dir = fs::temp_directory_path() / ("nmt-languages-broken-" + std::to_string(getpid()));
  fs::create_directories(dir / "nllb-en-de");
  fs::copy_file(std::string(NMT_REPO_ROOT) + "/tests/conformance/families/nllb/config.json",
                dir / "nllb-en-de" / "config.json");
  const ModelLanguages broken = model_languages((dir / "nllb-en-de").string(), "nllb-en-de");
  EXPECT_FALSE(broken.multilingual());
  EXPECT_FALSE(broken.known_pair());
  fs::remove_all(dir);
}
