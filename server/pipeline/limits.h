#pragma once
// Serving limits (config `limits.*`): what one request may ask for.

namespace nmt::server {

struct Limits {
  int max_sentences_per_request = 64;
  int max_input_tokens = 256;  // per sentence, after tokenization, </s> included
  int max_beam_size = 16;
  int max_decoding_length = 256;
  // Default of TranslateOptions.split_sentences (a request's own setting wins).
  bool split_sentences = false;
};

}  // namespace nmt::server
