#pragma once
// The readers of the formats that are text (plain_text.cc, subtitles.cc, markup_file.cc),
// for document.cc.
#include <memory>
#include <string>

#include "server/documents/document.h"

namespace nmt::server {

// .txt: UTF-8 (a byte-order mark kept), each line a text, its line ending kept.
std::unique_ptr<Document> read_plain_text(const std::string& bytes);
// .srt (SubRip): each cue's lines one text, its number and timing kept.
std::unique_ptr<Document> read_subtitles(const std::string& bytes);

// .html (html) or .md: server/markup's blocks; `filename` names the file in its refusals.
std::unique_ptr<Document> read_markup(const std::string& bytes, bool html, const std::string& filename);

// Throws DocumentError (400) at the first byte that is not UTF-8, naming its offset.
void check_utf8(const std::string& bytes);

}  // namespace nmt::server
