#pragma once
// Serving limits (config `limits.*`): what one request may ask for.

namespace nmt::server {

struct Limits {
  // Characters (Unicode code points, as LibreTranslate's char_limit counts them) of all a
  // request's texts together: the bound of one request's work. 50,000 is some twenty pages of
  // prose, a few hundred sentences; LibreTranslate's own default is unlimited, which lets
  // one request fill the queue for everyone (README, limits).
  int max_characters_per_request = 50000;
  int max_input_tokens = 256;  // per sentence, after tokenization, </s> included
  int max_beam_size = 16;
  int max_decoding_length = 256;
  // Default of TranslateOptions.split_sentences (a request's own setting wins): on, since the
  // models translate one sentence at a time and stop at its end (a paragraph sent whole
  // would come back as its first sentence).
  bool split_sentences = true;
  // How deep the elements of a text with markup (TranslateOptions.format html, markdown) may
  // nest: deeper is refused before it is parsed (server/markup/html.h says why).
  int max_markup_depth = 100;
  // Glossary (TranslateOptions.glossary, a model's glossary.tsv): entries a request may send,
  // and the characters of each term. Every entry's source term is looked for in every
  // sentence, and the entries that apply become the constrained search's phrases (at most
  // 64 a sentence: PhraseConstraints::kMaxPhrases).
  int max_glossary_entries = 256;
  int max_glossary_term_characters = 100;
};

}  // namespace nmt::server
