#pragma once
// A request's glossary (TranslateOptions.glossary) with the model's (glossary.tsv in the model
// folder, ServedModel::glossary), checked, and each sentence's required target phrases: the
// target terms of the entries whose source term occurs in it (model/text/glossary.h: whole
// words, case-sensitive), tokenized as the target side (Translator::encode_target: the term
// as it stands after a space mid-sentence). docs/decoding.md, "Glossary".
#include <functional>
#include <string>
#include <vector>

#include "model/decoding/decode_options.h"
#include "model/text/glossary.h"
#include "model/text/sentence_splitter.h"
#include "nmt/v1/translation.pb.h"
#include "server/pipeline/limits.h"

namespace nmt::server {

// The request's entries, checked against the limits: at most limits.max_glossary_entries, no
// empty term, each term at most limits.max_glossary_term_characters characters. Throws
// nmt::Error(kInvalidArgument) naming options.glossary[i] and the limit.
std::vector<GlossaryEntry> request_glossary(const v1::TranslateOptions& options, const Limits& limits);

using EncodeTargetFn = std::function<std::vector<int>(const std::string& text)>;

// Per sentence (`sentences`, in the order of the request's source ids), its phrases: the
// model's entries (unless options.ignore_model_glossary) and then the request's whose source
// occurs in it, each target term once. Empty when no entry applies to any sentence (every
// sentence takes plain beam search). Each sentence with phrases is checked as the search will
// be (DecodeOptions::validate_glossary with `options`): the refusals name options.glossary
// (a target term without tokens, terms that with </s> exceed max_decoding_length, sampling,
// target_prefix, the repetition controls, beam_size 1) and the sentence.
std::vector<std::vector<std::vector<int>>> sentence_phrases(const std::vector<GlossaryEntry>& model,
                                                            const std::vector<GlossaryEntry>& request,
                                                            const std::vector<std::string>& sentences,
                                                            const EncodeTargetFn& encode_target,
                                                            const DecodeOptions& options);

// The whole of it for a request: its entries (request_glossary), refused with options the search
// cannot honour (DecodeOptions::validate_glossary_use, named options.glossary), then
// sentence_phrases over its sentences (the texts, or `split`'s sentences in order) with the
// model's entries unless options.ignore_model_glossary.
std::vector<std::vector<std::vector<int>>> request_phrases(const v1::TranslateRequest& request,
                                                           const std::vector<SplitText>& split,
                                                           const std::vector<GlossaryEntry>& model, const Limits& limits,
                                                           const EncodeTargetFn& encode_target,
                                                           const DecodeOptions& options);

}  // namespace nmt::server
