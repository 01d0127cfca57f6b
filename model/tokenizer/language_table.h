#pragma once
// ISO 639-1 <-> ISO 639-3 (as FLORES-200 spells the language) for the languages of NLLB-200,
// M2M-100 and mBART-50, with the script each is written in by default and an English name.
// Internal to model/tokenizer/languages.cc.
#include <string_view>

namespace nmt::language_table {

struct Row {
  const char* iso639_1;  // "" where the language has none
  const char* iso639_3;  // FLORES-200's code: the individual language (arb for Arabic, zsm for Malay)
  const char* script;    // ISO 15924 code; "" where NLLB-200 has it in several (ks: Arab and Deva)
  const char* name;
};

const Row* by_iso639_1(std::string_view code);  // nullptr when unknown
const Row* by_iso639_3(std::string_view code);

}  // namespace nmt::language_table
