#include "model/text/sentence_splitter.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/utext.h>

#include <map>
#include <mutex>
#include <stdexcept>

namespace nmt {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Closes the UText when the call ends.
struct UTextCloser {
  void operator()(UText* t) const { utext_close(t); }
};

}  // namespace

std::string SplitText::join(const std::vector<std::string>& pieces) const {
  std::string out = gaps.empty() ? "" : gaps[0];
  for (size_t i = 0; i < pieces.size(); ++i) {
    out += pieces[i];
    if (i + 1 < gaps.size()) out += gaps[i + 1];
  }
  return out;
}

SentenceSplitter::SentenceSplitter(const std::string& language) {
  UErrorCode status = U_ZERO_ERROR;
  // "ss=standard": the CLDR sentence-break suppressions (abbreviations) of the language.
  const icu::Locale locale =
      language.empty() ? icu::Locale::getRoot() : icu::Locale((language + "@ss=standard").c_str());
  prototype_.reset(icu::BreakIterator::createSentenceInstance(locale, status));
  if (U_FAILURE(status) || !prototype_) {
    throw std::runtime_error(std::string("ICU has no sentence break rules: ") +
                             u_errorName(status));
  }
}

SentenceSplitter::~SentenceSplitter() = default;

const SentenceSplitter& SentenceSplitter::for_language(const std::string& language) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<SentenceSplitter>> splitters;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<SentenceSplitter>& s = splitters[language];
  if (!s) s = std::make_unique<SentenceSplitter>(language);
  return *s;
}

SplitText SentenceSplitter::split(const std::string& text) const {
  UErrorCode status = U_ZERO_ERROR;
  // Over the UTF-8 bytes directly: boundaries come back as byte offsets.
  std::unique_ptr<UText, UTextCloser> utext(
      utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status));
  std::unique_ptr<icu::BreakIterator> it(prototype_->clone());
  if (U_FAILURE(status) || !it) throw std::runtime_error("ICU cannot segment the text");
  it->setText(utext.get(), status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU: ") + u_errorName(status));

  SplitText out;
  std::string gap;  // whitespace since the last sentence
  int32_t start = it->first();
  for (int32_t end = it->next(); end != icu::BreakIterator::DONE; start = end, end = it->next()) {
    // A segment is a sentence with the whitespace (line breaks included) that follows it.
    size_t b = static_cast<size_t>(start), e = static_cast<size_t>(end);
    while (b < e && is_space(text[b])) gap += text[b++];
    size_t core_end = e;
    while (core_end > b && is_space(text[core_end - 1])) --core_end;
    if (core_end == b) continue;  // whitespace only: it stays in the gap
    out.gaps.push_back(std::move(gap));
    out.sentences.push_back(text.substr(b, core_end - b));
    gap = text.substr(core_end, e - core_end);
  }
  out.gaps.push_back(std::move(gap));
  return out;
}

}  // namespace nmt
