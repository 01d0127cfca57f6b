// OpenDocument text (.odt): the paragraphs and headings (text:p, text:h) of content.xml and
// styles.xml (page headers and footers). A text:span (a style: bold, italic) and a link
// (text:a) are containers, nested as they come; text:tab and text:line-break are "\t" and
// "\n" of the text; everything else inline (text:s extra spaces, bookmarks, notes, frames,
// fields) is a void kept as it is. Whitespace in text nodes is a space, as ODF reads it.
#include "server/documents/office/office_package.h"
#include "server/documents/office/xml_tree.h"

namespace nmt::server {
namespace {

constexpr const char* TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0";
using Kind = InlineItem::Kind;

bool is_text(const xmlNode* n, const char* local) { return is_element(n, TEXT, local); }

// `parent`: the span of the text:span or text:a `n` is in (-1: the paragraph).
void inline_node(InlineParagraph& p, xmlNode* n, int parent) {
  auto open = [&](Kind kind) {
    p.items.push_back({kind, n, nullptr});
    p.spans.push_back({p.text.size(), p.text.size(), static_cast<int>(p.items.size() - 1), parent});
    return p.spans.size() - 1;
  };
  if (n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) {
    for (const char* c = reinterpret_cast<const char*>(n->content); c && *c; ++c) {
      p.text += (*c == '\n' || *c == '\t' || *c == '\r') ? ' ' : *c;
    }
    return;
  }
  if (n->type != XML_ELEMENT_NODE) return;
  if (is_text(n, "span") || is_text(n, "a")) {
    const size_t span = open(Kind::kContainer);
    for (xmlNode* c = n->children; c; c = c->next) inline_node(p, c, static_cast<int>(span));
    p.spans[span].end = p.text.size();
  } else if (is_text(n, "tab")) {
    p.text += "\t";
  } else if (is_text(n, "line-break")) {
    p.text += "\n";
  } else {
    open(Kind::kVoid);
  }
}

InlineParagraph collect(xmlNode* paragraph) {
  InlineParagraph p;
  p.element = paragraph;
  for (xmlNode* c = paragraph->children; c; c = c->next) {
    p.content.push_back(c);
    inline_node(p, c, -1);
  }
  return p;
}

xmlNode* shell(xmlNode* original) { return xmlDocCopyNode(original, original->doc, 2); }

// Text nodes, with text:tab for "\t" and text:line-break for "\n".
void add_text(xmlNode* parent, const std::string& text) {
  xmlDoc* doc = parent->doc;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\t' && text[i] != '\n') continue;
    if (i > start) xmlAddChild(parent, xmlNewDocTextLen(doc, BAD_CAST text.data() + start, static_cast<int>(i - start)));
    if (i < text.size()) xmlAddChild(parent, new_element(doc, TEXT, text[i] == '\t' ? "tab" : "line-break"));
    start = i + 1;
  }
}

std::vector<std::string> parts(const ZipArchive& archive) {
  std::vector<std::string> out = {"content.xml"};
  if (archive.find("styles.xml")) out.push_back("styles.xml");
  return out;
}

}  // namespace

const OfficeFormat& odt_format() {
  static const OfficeFormat format{
      "OpenDocument text", "content.xml", parts,
      [](const xmlNode* n) { return is_text(n, "p") || is_text(n, "h"); }, collect,
      InlineFormat{shell, add_text}};
  return format;
}

}  // namespace nmt::server
