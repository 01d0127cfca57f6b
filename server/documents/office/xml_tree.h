#pragma once
// The XML parts of a document, parsed with libxml2 (Debian's libxml2-dev) so that a hostile
// part costs a refusal: no network (XML_PARSE_NONET), no external entities or DTD loading,
// entities never substituted, huge-tree mode off, and any document type declaration refused
// at once (an OOXML or ODF part has none; a DTD is where billion-laughs entities live);
// element nesting is bounded by documents.max_xml_depth.
#include <libxml/tree.h>

#include <memory>
#include <string>

#include "server/documents/document_limits.h"

namespace nmt::server {

struct XmlDocFree {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};
using XmlDoc = std::unique_ptr<xmlDoc, XmlDocFree>;

// Throws DocumentError (400) naming the part and what is wrong (the bound, or the parser's
// message with its line).
XmlDoc parse_xml(const std::string& text, const std::string& part, const DocumentLimits& limits);
// UTF-8, with the declaration (standalone kept).
std::string write_xml(xmlDoc* doc);

// Whether `node` is the element `local` of namespace `ns`.
bool is_element(const xmlNode* node, const char* ns, const char* local);
// The first child element `local` of namespace `ns`, or null.
xmlNode* child_element(xmlNode* node, const char* ns, const char* local);

}  // namespace nmt::server
