// Arbitrary bytes as an uploaded document (server/documents/): the first byte picks the
// format and whether the rest is the whole file (libzip's archive reading under the
// documents.* bounds, then every part) or one XML part put into an archive of that format
// (libxml2 under the bounds, then the paragraphs' runs). What is accepted is written back
// with each text translated as itself, aligned word for word, through span_transfer and the
// rebuild of every paragraph. A file is refused with DocumentError or read; nothing else
// may come out (no crash, leak or sanitizer report).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/documents/document.h"
#include "server/documents/office/zip_archive.h"

namespace {

using nmt::server::AlignedRange;
using nmt::server::DocumentError;
using nmt::server::DocumentLimits;
using nmt::server::TranslatedText;
using nmt::server::ZipArchive;

struct Format {
  const char* filename;
  const char* part;
  const char* required;
};
const Format kFormats[] = {
    {"f.docx", "word/document.xml", "word/document.xml"},
    {"f.odt", "content.xml", "content.xml"},
    {"f.pptx", "ppt/slides/slide1.xml", "ppt/presentation.xml"},
    {"f.srt", nullptr, nullptr},
    {"f.txt", nullptr, nullptr},
    {"f.html", nullptr, nullptr},
};

// Small bounds, so that they are reached.
DocumentLimits limits() {
  DocumentLimits l;
  l.max_archive_entries = 16;
  l.max_decompressed_bytes = 1 << 20;
  l.max_xml_depth = 64;
  return l;
}

// Each text as its own translation, every space-separated word aligned to itself.
std::vector<TranslatedText> identity(const std::vector<std::string>& texts) {
  std::vector<TranslatedText> out;
  for (const std::string& t : texts) {
    TranslatedText tt{t, {}};
    size_t b = 0;
    while (b < t.size()) {
      size_t e = t.find(' ', b);
      if (e == std::string::npos) e = t.size();
      if (e > b) tt.alignments.push_back(AlignedRange{b, e, b, e});
      b = e + 1;
    }
    out.push_back(std::move(tt));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Format& format = kFormats[data[0] % 6];
  const bool whole = data[0] & 0x80 || !format.part;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (!whole) {
    ZipArchive archive;
    archive.entries.push_back({format.required, format.required == std::string(format.part) ? bytes : "<x/>", false});
    if (format.required != std::string(format.part)) archive.entries.push_back({format.part, bytes, false});
    bytes = nmt::server::write_zip(archive);
  }
  try {
    auto document = nmt::server::read_document(format.filename, bytes, limits());
    document->write(identity(document->texts()));
  } catch (const DocumentError&) {
  }
  return 0;
}
