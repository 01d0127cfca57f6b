#pragma once
// Requested language names -> a model's own language codes (NLLB-200's deu_Latn, M2M-100's de,
// mBART-50's de_DE), and what a code means, for listing a model's languages.
#include <string>
#include <vector>

namespace nmt {

// Resolves a requested language to one of `codes` (the model's, as Tokenizer::languages()
// spells them): the model's own code (also in another case: "DEU_LATN", "en_xx"); a FLORES-200
// code such as deu_Latn (for M2M-100 / mBART-50 their code of the same language: de, de_DE);
// an ISO 639-1 code such as "de" or an ISO 639-3 one such as "deu", where exactly one of the
// model's codes is that language (NLLB-200's zho_Hans and zho_Hant make "zh" ambiguous). A
// region ("pt-BR", "de_DE") is ignored where the model has no code with it; a script
// ("zh-Hant", "srp_Latn") must match. Throws nmt::Error(kInvalidArgument) naming the request
// and listing the model's codes when none or several match.
std::string resolve_language(const std::string& requested, const std::vector<std::string>& codes);

// What a model's code names: ISO 639-1 and 639-3 codes, script, English name; a field is ""
// where the code does not say and the table of language_table.cc does not know.
struct LanguageInfo {
  std::string iso639_1, iso639_3, script, name;
};
LanguageInfo describe_language(const std::string& code);

}  // namespace nmt
