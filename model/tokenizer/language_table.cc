// Data only (see language_table.h). Where ISO 639-1 names a macrolanguage, its code maps to
// the individual language FLORES-200 uses for it, as NLLB-200's own language list does (ar ->
// arb, fa -> pes, ms -> zsm, sw -> swh, ...); the dialects (acm, arz, prs, ...) keep their
// ISO 639-3 codes only, so that "ar" is not ambiguous among them.
#include "model/tokenizer/language_table.h"

#include <algorithm>
#include <iterator>

namespace nmt::language_table {
namespace {

constexpr Row kRows[] = {
    {"af", "afr", "Latn", "Afrikaans"}, {"ak", "aka", "Latn", "Akan"}, {"am", "amh", "Ethi", "Amharic"},
    {"ar", "arb", "Arab", "Arabic"}, {"as", "asm", "Beng", "Assamese"}, {"ay", "ayr", "Latn", "Aymara"},
    {"az", "azj", "Latn", "Azerbaijani"}, {"ba", "bak", "Cyrl", "Bashkir"}, {"be", "bel", "Cyrl", "Belarusian"},
    {"bg", "bul", "Cyrl", "Bulgarian"}, {"bm", "bam", "Latn", "Bambara"}, {"bn", "ben", "Beng", "Bengali"},
    {"bo", "bod", "Tibt", "Tibetan"}, {"br", "bre", "Latn", "Breton"}, {"bs", "bos", "Latn", "Bosnian"},
    {"ca", "cat", "Latn", "Catalan"}, {"cs", "ces", "Latn", "Czech"}, {"cy", "cym", "Latn", "Welsh"},
    {"da", "dan", "Latn", "Danish"}, {"de", "deu", "Latn", "German"}, {"dz", "dzo", "Tibt", "Dzongkha"},
    {"ee", "ewe", "Latn", "Ewe"}, {"el", "ell", "Grek", "Greek"}, {"en", "eng", "Latn", "English"},
    {"eo", "epo", "Latn", "Esperanto"}, {"es", "spa", "Latn", "Spanish"}, {"et", "est", "Latn", "Estonian"},
    {"eu", "eus", "Latn", "Basque"}, {"fa", "pes", "Arab", "Persian"}, {"ff", "fuv", "Latn", "Fula"},
    {"fi", "fin", "Latn", "Finnish"}, {"fj", "fij", "Latn", "Fijian"}, {"fo", "fao", "Latn", "Faroese"},
    {"fr", "fra", "Latn", "French"}, {"fy", "fry", "Latn", "Western Frisian"}, {"ga", "gle", "Latn", "Irish"},
    {"gd", "gla", "Latn", "Scottish Gaelic"}, {"gl", "glg", "Latn", "Galician"}, {"gn", "grn", "Latn", "Guarani"},
    {"gu", "guj", "Gujr", "Gujarati"}, {"ha", "hau", "Latn", "Hausa"}, {"he", "heb", "Hebr", "Hebrew"},
    {"hi", "hin", "Deva", "Hindi"}, {"hr", "hrv", "Latn", "Croatian"}, {"ht", "hat", "Latn", "Haitian Creole"},
    {"hu", "hun", "Latn", "Hungarian"}, {"hy", "hye", "Armn", "Armenian"}, {"id", "ind", "Latn", "Indonesian"},
    {"ig", "ibo", "Latn", "Igbo"}, {"is", "isl", "Latn", "Icelandic"}, {"it", "ita", "Latn", "Italian"},
    {"ja", "jpn", "Jpan", "Japanese"}, {"jv", "jav", "Latn", "Javanese"}, {"ka", "kat", "Geor", "Georgian"},
    {"kg", "kon", "Latn", "Kongo"}, {"ki", "kik", "Latn", "Kikuyu"}, {"kk", "kaz", "Cyrl", "Kazakh"},
    {"km", "khm", "Khmr", "Khmer"}, {"kn", "kan", "Knda", "Kannada"}, {"ko", "kor", "Hang", "Korean"},
    {"kr", "knc", "", "Kanuri"}, {"ks", "kas", "", "Kashmiri"}, {"ku", "kmr", "Latn", "Kurdish (Kurmanji)"},
    {"ky", "kir", "Cyrl", "Kyrgyz"}, {"lb", "ltz", "Latn", "Luxembourgish"}, {"lg", "lug", "Latn", "Ganda"},
    {"li", "lim", "Latn", "Limburgish"}, {"ln", "lin", "Latn", "Lingala"}, {"lo", "lao", "Laoo", "Lao"},
    {"lt", "lit", "Latn", "Lithuanian"}, {"lv", "lvs", "Latn", "Latvian"}, {"mg", "plt", "Latn", "Malagasy"},
    {"mi", "mri", "Latn", "Maori"}, {"mk", "mkd", "Cyrl", "Macedonian"}, {"ml", "mal", "Mlym", "Malayalam"},
    {"mn", "khk", "Cyrl", "Mongolian"}, {"mr", "mar", "Deva", "Marathi"}, {"ms", "zsm", "Latn", "Malay"},
    {"mt", "mlt", "Latn", "Maltese"}, {"my", "mya", "Mymr", "Burmese"}, {"nb", "nob", "Latn", "Norwegian Bokmal"},
    {"ne", "npi", "Deva", "Nepali"}, {"nl", "nld", "Latn", "Dutch"}, {"nn", "nno", "Latn", "Norwegian Nynorsk"},
    // M2M-100 spells Norwegian "no" (the macrolanguage) and Northern Sotho "ns" (no ISO 639-1 code).
    {"no", "nob", "Latn", "Norwegian"}, {"ns", "nso", "Latn", "Northern Sotho"},
    {"ny", "nya", "Latn", "Nyanja"}, {"oc", "oci", "Latn", "Occitan"}, {"om", "gaz", "Latn", "Oromo"},
    {"or", "ory", "Orya", "Odia"}, {"pa", "pan", "Guru", "Punjabi"}, {"pl", "pol", "Latn", "Polish"},
    {"ps", "pbt", "Arab", "Pashto"}, {"pt", "por", "Latn", "Portuguese"}, {"qu", "quy", "Latn", "Quechua"},
    {"rn", "run", "Latn", "Rundi"}, {"ro", "ron", "Latn", "Romanian"}, {"ru", "rus", "Cyrl", "Russian"},
    {"rw", "kin", "Latn", "Kinyarwanda"}, {"sa", "san", "Deva", "Sanskrit"}, {"sc", "srd", "Latn", "Sardinian"},
    {"sd", "snd", "Arab", "Sindhi"}, {"sg", "sag", "Latn", "Sango"}, {"si", "sin", "Sinh", "Sinhala"},
    {"sk", "slk", "Latn", "Slovak"}, {"sl", "slv", "Latn", "Slovenian"}, {"sm", "smo", "Latn", "Samoan"},
    {"sn", "sna", "Latn", "Shona"}, {"so", "som", "Latn", "Somali"}, {"sq", "als", "Latn", "Albanian"},
    {"sr", "srp", "Cyrl", "Serbian"}, {"ss", "ssw", "Latn", "Swati"}, {"st", "sot", "Latn", "Southern Sotho"},
    {"su", "sun", "Latn", "Sundanese"}, {"sv", "swe", "Latn", "Swedish"}, {"sw", "swh", "Latn", "Swahili"},
    {"ta", "tam", "Taml", "Tamil"}, {"te", "tel", "Telu", "Telugu"}, {"tg", "tgk", "Cyrl", "Tajik"},
    {"th", "tha", "Thai", "Thai"}, {"ti", "tir", "Ethi", "Tigrinya"}, {"tk", "tuk", "Latn", "Turkmen"},
    {"tl", "tgl", "Latn", "Tagalog"}, {"tn", "tsn", "Latn", "Tswana"}, {"tr", "tur", "Latn", "Turkish"},
    {"ts", "tso", "Latn", "Tsonga"}, {"tt", "tat", "Cyrl", "Tatar"}, {"tw", "twi", "Latn", "Twi"},
    {"ug", "uig", "Arab", "Uyghur"}, {"uk", "ukr", "Cyrl", "Ukrainian"}, {"ur", "urd", "Arab", "Urdu"},
    {"uz", "uzn", "Latn", "Uzbek"}, {"vi", "vie", "Latn", "Vietnamese"}, {"wo", "wol", "Latn", "Wolof"},
    {"xh", "xho", "Latn", "Xhosa"}, {"yi", "ydd", "Hebr", "Yiddish"}, {"yo", "yor", "Latn", "Yoruba"},
    {"zh", "zho", "Hans", "Chinese"}, {"zu", "zul", "Latn", "Zulu"},
    // FLORES-200 languages without an ISO 639-1 code.
    {"", "ace", "", "Acehnese"}, {"", "acm", "Arab", "Mesopotamian Arabic"}, {"", "acq", "Arab", "Ta'izzi-Adeni Arabic"},
    {"", "aeb", "Arab", "Tunisian Arabic"}, {"", "ajp", "Arab", "South Levantine Arabic"},
    {"", "apc", "Arab", "North Levantine Arabic"}, {"", "ars", "Arab", "Najdi Arabic"},
    {"", "ary", "Arab", "Moroccan Arabic"}, {"", "arz", "Arab", "Egyptian Arabic"}, {"", "ast", "Latn", "Asturian"},
    {"", "awa", "Deva", "Awadhi"}, {"", "azb", "Arab", "South Azerbaijani"}, {"", "ban", "Latn", "Balinese"},
    {"", "bem", "Latn", "Bemba"}, {"", "bho", "Deva", "Bhojpuri"}, {"", "bjn", "", "Banjar"},
    {"", "bug", "Latn", "Buginese"}, {"", "ceb", "Latn", "Cebuano"}, {"", "cjk", "Latn", "Chokwe"},
    {"", "ckb", "Arab", "Central Kurdish"}, {"", "crh", "Latn", "Crimean Tatar"}, {"", "dik", "Latn", "Southwestern Dinka"},
    {"", "dyu", "Latn", "Dyula"}, {"", "fon", "Latn", "Fon"}, {"", "fur", "Latn", "Friulian"},
    {"", "hne", "Deva", "Chhattisgarhi"}, {"", "ilo", "Latn", "Ilocano"}, {"", "kab", "Latn", "Kabyle"},
    {"", "kac", "Latn", "Jingpho"}, {"", "kam", "Latn", "Kamba"}, {"", "kbp", "Latn", "Kabiye"},
    {"", "kea", "Latn", "Kabuverdianu"}, {"", "kmb", "Latn", "Kimbundu"}, {"", "lij", "Latn", "Ligurian"},
    {"", "lmo", "Latn", "Lombard"}, {"", "ltg", "Latn", "Latgalian"}, {"", "lua", "Latn", "Luba-Kasai"},
    {"", "luo", "Latn", "Luo"}, {"", "lus", "Latn", "Mizo"}, {"", "mag", "Deva", "Magahi"},
    {"", "mai", "Deva", "Maithili"}, {"", "min", "Latn", "Minangkabau"}, {"", "mni", "Beng", "Meitei"},
    {"", "mos", "Latn", "Mossi"}, {"", "nus", "Latn", "Nuer"}, {"", "pag", "Latn", "Pangasinan"},
    {"", "pap", "Latn", "Papiamento"}, {"", "prs", "Arab", "Dari"}, {"", "sat", "Olck", "Santali"},
    {"", "scn", "Latn", "Sicilian"}, {"", "shn", "Mymr", "Shan"}, {"", "szl", "Latn", "Silesian"},
    {"", "taq", "", "Tamasheq"}, {"", "tpi", "Latn", "Tok Pisin"}, {"", "tum", "Latn", "Tumbuka"},
    {"", "tzm", "Tfng", "Central Atlas Tamazight"}, {"", "umb", "Latn", "Umbundu"}, {"", "vec", "Latn", "Venetian"},
    {"", "war", "Latn", "Waray"}, {"", "yue", "Hant", "Cantonese"},
};

template <typename Field>
const Row* find(std::string_view code, Field field) {
  if (code.empty()) return nullptr;
  const auto it = std::find_if(std::begin(kRows), std::end(kRows), [&](const Row& r) { return code == field(r); });
  return it == std::end(kRows) ? nullptr : &*it;
}

}  // namespace

const Row* by_iso639_1(std::string_view code) {
  return find(code, [](const Row& r) { return std::string_view(r.iso639_1); });
}
const Row* by_iso639_3(std::string_view code) {
  return find(code, [](const Row& r) { return std::string_view(r.iso639_3); });
}

}  // namespace nmt::language_table
