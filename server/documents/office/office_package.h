#pragma once
// The documents that are zip archives of XML parts (.docx, .pptx: OOXML; .odt: ODF) read
// and written one way: the archive (zip_archive.h) and its parts (xml_tree.h) under
// DocumentLimits, every paragraph of the format's parts as text plus inline spans
// (inline_runs.h), nested paragraphs (a text box, a note) included; written back with each
// paragraph's translation and its spans placed on it, every other entry as it was.
#include <libxml/tree.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/documents/document.h"
#include "server/documents/office/inline_runs.h"
#include "server/documents/office/zip_archive.h"

namespace nmt::server {

struct OfficeFormat {
  const char* what;           // "Word document", in messages
  const char* required_part;  // the entry without which the file is not one
  // The entries whose paragraphs are translated, in reading order.
  std::function<std::vector<std::string>(const ZipArchive&)> parts;
  std::function<bool(const xmlNode*)> is_paragraph;
  // A paragraph's text, spans and inline content (nested paragraphs left inside voids).
  std::function<InlineParagraph(xmlNode* paragraph)> collect;
  InlineFormat write;
};

const OfficeFormat& docx_format();
const OfficeFormat& odt_format();
const OfficeFormat& pptx_format();

// Throws DocumentError (400) naming the bound or what is missing or malformed.
std::unique_ptr<Document> read_office(const std::string& bytes, const OfficeFormat& format,
                                      const DocumentLimits& limits);

// A new element `local` of the namespace `ns` declared on the document's root (the formats'
// prefixes: w:, a:, text:).
xmlNode* new_element(xmlDoc* doc, const char* ns, const char* local);
// The text of a node's text children (w:t, a:t).
std::string text_of(const xmlNode* node);
// Entries whose name is `prefix` NUMBER `suffix`, by number (slide2 before slide10).
std::vector<std::string> numbered_entries(const ZipArchive& archive, const std::string& prefix,
                                          const std::string& suffix);

}  // namespace nmt::server
