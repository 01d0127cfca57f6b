// The fairseq-dictionary tokenizers (NLLB-200, M2M-100, mBART-50) on folders that
// make_fairseq_tokenizers.py writes around a SentencePiece model it trains on the project's
// sentences: id layouts, specials, offsets, both NLLB layouts, decoding, refusals. The ids are
// checked against SentencePiece's own output for the same text (spm.jsonl); transformers'
// ids are the conformance data's (tests/conformance/families).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/config/model_config.h"
#include "model/error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/error_of.h"
#include "tests/support/golden.h"

using namespace nmt;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kNllbCodes = {"eng_Latn", "deu_Latn", "fra_Latn", "zho_Hans",
                                             "zho_Hant", "arb_Arab", "arz_Arab"};
const std::vector<std::string> kM2MCodes = {"en", "de", "fr", "zh", "no"};
const std::vector<std::string> kMBartCodes = {"en_XX", "de_DE", "fr_XX", "zh_CN"};

struct SpmCase {
  std::string text;
  std::vector<int> spm_ids;
  std::vector<std::string> pieces;
  std::string spm_decoded;
  bool trailing_space;  // the text ends with spaces (SentencePiece drops them)
  int space_id;         // SentencePiece's id of the piece "\u2581"
};

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}
void write_json(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(); }

// What an error says, or "" when none is thrown.
}  // namespace

class FairseqTokenizers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("nmt-fairseq-tok-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const std::string cmd = "/usr/bin/python3 " + test::repo_root() + "/tests/model/tokenizer/make_fairseq_tokenizers.py " +
                            root_.string();
    // Not ASSERT: a fatal failure here reads "[  SKIPPED ]" to ctest (gtest skips the suite's
    // tests), so it is kept for SetUp() to fail each test with.
    if (std::system(cmd.c_str()) != 0) {
      setup_error_ = cmd + " failed (it needs Debian's python3-sentencepiece)";
      return;
    }
    std::ifstream in(root_ / "spm.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      cases_.push_back({j["text"], j["spm_ids"].get<std::vector<int>>(), j["pieces"].get<std::vector<std::string>>(),
                        j["spm_decoded"], j["trailing_space"], j["space_id"]});
      spm_size_ = j["spm_size"];
    }
    if (cases_.size() < 5) setup_error_ = "make_fairseq_tokenizers.py wrote " + std::to_string(cases_.size()) + " cases";
  }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A config of the family, with room for every token of the folders (fairseq: pieces + 1,
  // the codes, <mask>).
  static ModelConfig config(Family family, int extra_rows = 0) {
    ModelConfig c;
    c.arch = Architecture::of(family);
    c.vocab_size = c.target_vocab_size = spm_size_ + 1 + 7 + 1 + extra_rows;
    c.pad_id = 1;
    c.eos_id = 2;
    return c;
  }
  static std::unique_ptr<Tokenizer> load(const std::string& name, const ModelConfig& c) {
    return Tokenizer::load((root_ / name).string(), c);
  }
  // A writable copy of a folder, for variants.
  fs::path copy_of(const std::string& name) const {
    const fs::path dir = root_ / (name + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::copy(root_ / name, dir);
    return dir;
  }
  // fairseq's alignment: SentencePiece's <unk> (0) is 3, every other piece its id + 1; and
  // as the tokenizers library's Metaspace pipeline (NLLB, mBART-50), spaces at the end of the
  // text are one more word "\u2581".
  static std::vector<int> fairseq_ids(const SpmCase& c) {
    std::vector<int> ids;
    for (int id : c.spm_ids) ids.push_back(id == 0 ? 3 : id + 1);
    if (c.trailing_space) ids.push_back(c.space_id + 1);
    return ids;
  }

  static fs::path root_;
  static std::vector<SpmCase> cases_;
  static int spm_size_;
  static std::string setup_error_;  // why SetUpTestSuite could not make the folders
};
fs::path FairseqTokenizers::root_;
std::vector<SpmCase> FairseqTokenizers::cases_;
int FairseqTokenizers::spm_size_ = 0;
std::string FairseqTokenizers::setup_error_;

// NllbTokenizer without tokenizer.json: [src_lang] (spm ids + 1) </s>, the codes numbered
// after the pieces in the order tokenizer_config.json lists them.
TEST_F(FairseqTokenizers, NllbSourceIsLanguagePiecesPlusOneEos) {
  const auto tok = load("nllb", config(Family::kM2M100));
  ASSERT_EQ(tok->languages(), kNllbCodes);
  EXPECT_EQ(tok->default_source_language(), "eng_Latn");
  for (size_t k = 0; k < kNllbCodes.size(); ++k) {
    const int lang = spm_size_ + 1 + int(k);
    EXPECT_EQ(tok->language_token(kNllbCodes[k]), lang);
    for (const auto& c : cases_) {
      std::vector<int> want{lang};
      for (int id : fairseq_ids(c)) want.push_back(id);
      want.push_back(2);
      EXPECT_EQ(tok->encode(c.text, kNllbCodes[k]), want) << "'" << c.text << "' in " << kNllbCodes[k];
    }
  }
  EXPECT_EQ(tok->encode(cases_[0].text), tok->encode(cases_[0].text, "eng_Latn"));
  EXPECT_EQ(tok->language_token("xx_Latn"), -1);
  EXPECT_EQ(tok->vocab_size(), spm_size_ + 1 + int(kNllbCodes.size()) + 1);  // <mask> last
}

// legacy_behaviour: X </s> [src_lang].
TEST_F(FairseqTokenizers, NllbLegacyPutsTheLanguageAfterEos) {
  const auto tok = load("nllb_legacy", config(Family::kM2M100));
  for (const auto& c : cases_) {
    std::vector<int> want = fairseq_ids(c);
    want.push_back(2);
    want.push_back(tok->language_token("fra_Latn"));
    EXPECT_EQ(tok->encode(c.text, "fra_Latn"), want) << c.text;
  }
}

// With tokenizer.json its vocabulary and added_tokens give the ids (here the codes in an
// order of their own, and no code list in tokenizer_config.json).
TEST_F(FairseqTokenizers, NllbTokenizerJsonGivesTheIds) {
  const auto plain = load("nllb", config(Family::kM2M100));
  const auto tok = load("nllb_json", config(Family::kM2M100));
  const std::vector<std::string> reversed(kNllbCodes.rbegin(), kNllbCodes.rend());
  ASSERT_EQ(tok->languages(), reversed);
  EXPECT_EQ(tok->default_source_language(), "deu_Latn");
  EXPECT_EQ(tok->language_token("zul_Latn"), -1);
  for (size_t k = 0; k < reversed.size(); ++k) EXPECT_EQ(tok->language_token(reversed[k]), spm_size_ + 1 + int(k));
  for (const auto& c : cases_) {
    std::vector<int> want = plain->encode(c.text, "deu_Latn");
    want.front() = tok->language_token("deu_Latn");
    EXPECT_EQ(tok->encode(c.text), want) << c.text;
    EXPECT_EQ(tok->decode(want), plain->decode(plain->encode(c.text))) << c.text;
  }
}

// M2M100Tokenizer: vocab.json maps the pieces, the codes __xx__ follow it (spelled "xx").
TEST_F(FairseqTokenizers, M2M100MapsPiecesThroughVocabJson) {
  const auto vocab = read_json(root_ / "m2m100" / "vocab.json");
  const auto tok = load("m2m100", config(Family::kM2M100));
  ASSERT_EQ(tok->languages(), kM2MCodes);
  EXPECT_EQ(tok->default_source_language(), "de");
  EXPECT_EQ(tok->default_target_language(), "fr");
  for (size_t k = 0; k < kM2MCodes.size(); ++k) EXPECT_EQ(tok->language_token(kM2MCodes[k]), int(vocab.size() + k));
  EXPECT_EQ(tok->language_token("__de__"), -1);  // the code, not the token
  for (const auto& c : cases_) {
    std::vector<int> want{tok->language_token("en")};
    for (const auto& p : c.pieces) want.push_back(p == "<unk>" ? 3 : vocab.at(p).get<int>());
    want.push_back(2);
    EXPECT_EQ(tok->encode(c.text, "en"), want) << c.text;
  }
}

// MBart50Tokenizer: codes from special_tokens_map.json; src_lang null is transformers'
// default en_XX.
TEST_F(FairseqTokenizers, MBart50CodesFromSpecialTokensMap) {
  const auto tok = load("mbart50", config(Family::kMBart));
  ASSERT_EQ(tok->languages(), kMBartCodes);
  EXPECT_EQ(tok->default_source_language(), "en_XX");
  std::vector<int> want{spm_size_ + 1 + 1};  // de_DE
  for (int id : fairseq_ids(cases_[0])) want.push_back(id);
  want.push_back(2);
  EXPECT_EQ(tok->encode(cases_[0].text, "de_DE"), want);
}

// decode(skip_special_tokens=True): the text SentencePiece decodes for the same pieces; the
// language codes (declared special by these folders), specials and <mask> add nothing.
TEST_F(FairseqTokenizers, DecodeIsSentencePiecesTextWithoutSpecials) {
  for (const std::string name : {"nllb", "nllb_legacy", "nllb_json", "m2m100", "mbart50"}) {
    const auto tok = load(name, config(name == "mbart50" ? Family::kMBart : Family::kM2M100));
    for (const auto& c : cases_) {
      if (c.spm_decoded.find("\xE2\x81\x87") != std::string::npos) continue;  // SentencePiece's unk mark
      std::vector<int> ids = tok->encode(c.text, tok->languages()[1]);
      ids.insert(ids.begin() + 1, {0, 1, tok->language_token(tok->languages()[2])});
      ids.push_back(tok->vocab_size() - 1);  // NLLB / mBART: <mask>; M2M-100: its last code
      // The Metaspace decoder keeps the trailing "\u2581" as a space; SentencePiece strips.
      const bool trailing = c.trailing_space && name != "m2m100";
      EXPECT_EQ(tok->decode(ids), c.spm_decoded + (trailing ? " " : "")) << name << ": " << c.text;
    }
  }
}

// <unk> is special: dropped, the spaces around it kept ("\u2581" before it, "\u2581and" after).
TEST_F(FairseqTokenizers, DecodeDropsUnknownPieces) {
  const auto tok = load("nllb", config(Family::kM2M100));
  const SpmCase& c = cases_.back();
  ASSERT_NE(std::find(c.spm_ids.begin(), c.spm_ids.end(), 0), c.spm_ids.end()) << c.text;
  EXPECT_EQ(tok->decode(tok->encode(c.text)), "unknown characters:  and more");
}

TEST_F(FairseqTokenizers, CleanUpTokenizationSpacesWhenTheConfigSaysSo) {
  const fs::path dir = copy_of("nllb");
  auto cfg = read_json(dir / "tokenizer_config.json");
  const auto plain = Tokenizer::load(dir.string(), config(Family::kM2M100));
  const std::vector<int> ids = plain->encode("a dog , a man .");
  EXPECT_EQ(plain->decode(ids), "a dog , a man .");
  cfg["clean_up_tokenization_spaces"] = true;
  write_json(dir / "tokenizer_config.json", cfg);
  EXPECT_EQ(Tokenizer::load(dir.string(), config(Family::kM2M100))->decode(ids), "a dog, a man.");
}

// config.json's vocab_size may exceed the tokenizer (NLLB-200: two rows more): those ids
// decode to nothing; beyond vocab_size an id is an error.
TEST_F(FairseqTokenizers, IdsBeyondTheTokenizerButInTheModel) {
  const ModelConfig c = config(Family::kM2M100, 2);
  const auto tok = load("nllb", c);
  EXPECT_EQ(tok->decode({tok->vocab_size(), tok->vocab_size() + 1}), "");
  EXPECT_NE(test::error_of([&] { tok->decode({c.vocab_size}); }).find("not in the vocabulary"), std::string::npos);
  EXPECT_NE(test::error_of([&] { tok->decode({-1}); }).find("not in the vocabulary"), std::string::npos);
}

TEST_F(FairseqTokenizers, UnknownSourceLanguageNamesItAndListsTheCodes) {
  const auto tok = load("nllb", config(Family::kM2M100));
  const std::string e = test::error_of([&] { tok->encode("a", "deu_Latm"); });
  EXPECT_NE(e.find("'deu_Latm'"), std::string::npos) << e;
  EXPECT_NE(e.find("eng_Latn, deu_Latn, fra_Latn"), std::string::npos) << e;
}

// A folder the tokenizer cannot serve is refused with one line naming the file.
TEST_F(FairseqTokenizers, RefusedFolders) {
  {  // fewer embedding rows than tokens
    ModelConfig small = config(Family::kM2M100);
    small.vocab_size = small.target_vocab_size = spm_size_;
    const std::string e = test::error_of([&] { load("nllb", small); });
    EXPECT_NE(e.find("vocab_size " + std::to_string(spm_size_)), std::string::npos) << e;
    EXPECT_NE(e.find("sentencepiece.bpe.model"), std::string::npos) << e;
  }
  {  // the same through tokenizer.json
    ModelConfig small = config(Family::kM2M100);
    small.vocab_size = small.target_vocab_size = spm_size_ + 3;
    const std::string e = test::error_of([&] { load("nllb_json", small); });
    EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  }
  {  // </s> where config.json does not put it
    ModelConfig other = config(Family::kM2M100);
    other.eos_id = 0;
    EXPECT_NE(test::error_of([&] { load("nllb", other); }).find("eos_token_id"), std::string::npos);
  }
  {  // the tokenizer of another family
    EXPECT_NE(test::error_of([&] { load("mbart50", config(Family::kM2M100)); }).find("model_type 'm2m_100'"), std::string::npos);
  }
  {
    const fs::path dir = copy_of("nllb");
    fs::remove(dir / "sentencepiece.bpe.model");
    const std::string e = test::error_of([&] { Tokenizer::load(dir.string(), config(Family::kM2M100)); });
    EXPECT_NE(e.find(dir.string() + ": missing file 'sentencepiece.bpe.model'"), std::string::npos) << e;
  }
  {
    const fs::path dir = copy_of("m2m100");
    fs::remove(dir / "vocab.json");
    const std::string e = test::error_of([&] { Tokenizer::load(dir.string(), config(Family::kM2M100)); });
    EXPECT_NE(e.find(dir.string() + ": missing file 'vocab.json'"), std::string::npos) << e;
  }
  {
    const fs::path dir = copy_of("nllb");
    fs::remove(dir / "tokenizer_config.json");
    const std::string e = test::error_of([&] { Tokenizer::load(dir.string(), config(Family::kM2M100)); });
    EXPECT_NE(e.find(dir.string() + ": missing file 'tokenizer_config.json'"), std::string::npos) << e;
  }
  {  // no language codes anywhere
    const fs::path dir = copy_of("nllb");
    auto cfg = read_json(dir / "tokenizer_config.json");
    cfg.erase("additional_special_tokens");
    write_json(dir / "tokenizer_config.json", cfg);
    const std::string e = test::error_of([&] { Tokenizer::load(dir.string(), config(Family::kM2M100)); });
    EXPECT_NE(e.find("no language codes"), std::string::npos) << e;
  }
  {  // src_lang that is not a code
    const fs::path dir = copy_of("nllb");
    auto cfg = read_json(dir / "tokenizer_config.json");
    cfg["src_lang"] = "xyz_Latn";
    write_json(dir / "tokenizer_config.json", cfg);
    const std::string e = test::error_of([&] { Tokenizer::load(dir.string(), config(Family::kM2M100)); });
    EXPECT_NE(e.find("tokenizer_config.json: src_lang 'xyz_Latn'"), std::string::npos) << e;
  }
  {
    const fs::path dir = copy_of("nllb");
    write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "XLMRobertaTokenizer"}});
    const std::string e = test::error_of([&] { Tokenizer::load(dir.string(), config(Family::kM2M100)); });
    EXPECT_NE(e.find("'tokenizer_class' is 'XLMRobertaTokenizer'"), std::string::npos) << e;
  }
}

// Text that spells an added token (a special, a language code, <mask>) is that token, the text
// around it tokenized on its own (transformers splits on its added tokens first).
TEST_F(FairseqTokenizers, AddedTokensInTheTextAreTokens) {
  for (const std::string name : {"nllb", "nllb_legacy", "m2m100"}) {
    const auto tok = load(name, config(Family::kM2M100));
    const std::string lang = tok->languages()[0];
    auto body = [&](const std::string& text) {  // the pieces of text alone
      std::vector<int> ids = tok->encode(text, lang);
      ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int id) { return id == 2 || id == tok->language_token(lang); }),
                ids.end());
      return ids;
    };
    const std::string code = name == "m2m100" ? "__de__" : "deu_Latn";
    const int code_id = tok->language_token(name == "m2m100" ? "de" : "deu_Latn");
    // Each part keeps its own trailing-space word where the scheme has one (body(" ")).
    std::vector<int> want = body("A man");
    for (int id : body(" ")) want.push_back(id);
    want.push_back(2);
    for (int id : body("is")) want.push_back(id);
    for (int id : body(" ")) want.push_back(id);
    want.push_back(code_id);
    want.push_back(1);
    for (int id : body("riding.")) want.push_back(id);
    // The part between the layout's own language token and its </s>.
    const std::vector<int> all = tok->encode("A man </s> is " + code + "<pad> riding.", lang);
    std::vector<int> inner(all.begin() + (name == "nllb_legacy" ? 0 : 1), all.end() - (name == "nllb_legacy" ? 2 : 1));
    EXPECT_EQ(inner, want) << name;
  }
}

// An added token with lstrip (NLLB's <mask>, as tokenizer.json marks it) takes the spaces on
// its left: no trailing-space word before it.
TEST_F(FairseqTokenizers, LstripTokenTakesTheSpacesOnItsLeft) {
  const auto tok = load("nllb_json", config(Family::kM2M100));
  const auto plain = load("nllb", config(Family::kM2M100));  // no tokenizer.json: no lstrip
  const int mask = tok->vocab_size() - 1;
  auto inner = [](const std::vector<int>& ids) { return std::vector<int>(ids.begin() + 1, ids.end() - 1); };
  std::vector<int> want = inner(tok->encode("a"));
  want.push_back(mask);
  for (int id : inner(tok->encode(" b"))) want.push_back(id);
  EXPECT_EQ(inner(tok->encode("a  <mask> b")), want);
  std::vector<int> spaced = inner(plain->encode("a "));
  spaced.push_back(mask);
  for (int id : inner(plain->encode(" b"))) spaced.push_back(id);
  EXPECT_EQ(inner(plain->encode("a  <mask> b")), spaced);
  EXPECT_NE(want, spaced);
}
