#pragma once
// Sentence segmentation for TranslateOptions.split_sentences: ICU's sentence BreakIterator
// (Unicode UAX #29 rules, plus the language's list of abbreviations that end no sentence,
// "Mr." or "z.B."). The models translate one sentence at a time; a paragraph is split, its
// sentences translated as separate items, and the translations joined with the
// paragraph's own whitespace between them.
#include <unicode/uversion.h>

#include <memory>
#include <string>
#include <vector>

U_NAMESPACE_BEGIN
class BreakIterator;
U_NAMESPACE_END

namespace nmt {

// A text cut into sentences, and the whitespace around them.
struct SplitText {
  std::vector<std::string> sentences;  // in order, each non-empty with no whitespace at its ends
  // gaps[i] precedes sentences[i]; gaps.back() follows the last one (sentences.size() + 1
  // entries). Concatenating gaps and sentences alternately gives the text back.
  std::vector<std::string> gaps;

  // `pieces` (one per sentence, e.g. translations) with this text's whitespace around them.
  std::string join(const std::vector<std::string>& pieces) const;
};

class SentenceSplitter {
 public:
  // `language`: ISO 639 code of the source language ("en", "de"); "" or an unknown code
  // uses ICU's root rules, which know no abbreviations. Throws std::runtime_error when ICU
  // has no sentence rules at all (a broken ICU data install).
  explicit SentenceSplitter(const std::string& language = "");
  ~SentenceSplitter();
  SentenceSplitter(const SentenceSplitter&) = delete;
  SentenceSplitter& operator=(const SentenceSplitter&) = delete;

  // One splitter per language, made on first use and kept for the process (thread-safe).
  static const SentenceSplitter& for_language(const std::string& language);

  // `text` must be valid UTF-8. Thread-safe. A text with no sentence break is one sentence;
  // whitespace-only text gives no sentence (one gap).
  SplitText split(const std::string& text) const;

 private:
  std::unique_ptr<icu::BreakIterator> prototype_;  // cloned per call: iterators hold state
};

}  // namespace nmt
