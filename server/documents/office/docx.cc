// Word documents (.docx, WordprocessingML): the paragraphs (w:p) of the body, headers,
// footers, footnotes and endnotes. A run with properties (w:r with w:rPr: bold, italic, a
// font) is a leaf span; its text is its w:t, w:tab ("\t") and w:br ("\n"); anything else a
// run holds (a field code, a drawing, a footnote reference) is a void kept in a copy of its
// run. Links (w:hyperlink), smart tags, tracked insertions and custom XML are containers;
// other inline elements (bookmarks, proofing marks, tracked deletions, content controls)
// are voids. A run without properties is plain text.
#include <cstring>

#include "server/documents/office/office_package.h"
#include "server/documents/office/xml_tree.h"

namespace nmt::server {
namespace {

constexpr const char* W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
using Kind = InlineItem::Kind;

bool is_w(const xmlNode* n, const char* local) { return is_element(n, W, local); }

// A w:br that breaks the line (not a page or column break, which stays a void).
bool line_break(xmlNode* n) {
  if (!is_w(n, "br")) return false;
  xmlChar* type = xmlGetNsProp(n, BAD_CAST "type", BAD_CAST W);
  const bool line = !type || std::strcmp(reinterpret_cast<char*>(type), "textWrapping") == 0;
  xmlFree(type);
  return line;
}

class Collector {
 public:
  explicit Collector(InlineParagraph& p) : p_(p) {}

  void inline_node(xmlNode* n) {
    if (n->type != XML_ELEMENT_NODE) return;  // whitespace between elements
    if (is_w(n, "r")) return run(n);
    if (is_w(n, "hyperlink") || is_w(n, "smartTag") || is_w(n, "ins") || is_w(n, "customXml")) {
      const size_t span = open(Kind::kContainer, n);
      containers_.push_back(static_cast<int>(span));
      for (xmlNode* c = n->children; c; c = c->next) inline_node(c);
      containers_.pop_back();
      p_.spans[span].end = p_.text.size();
      return;
    }
    add_void(n, nullptr);
  }

 private:
  size_t open(Kind kind, xmlNode* node, xmlNode* wrap = nullptr) {
    p_.items.push_back({kind, node, wrap});
    p_.spans.push_back({p_.text.size(), p_.text.size(), static_cast<int>(p_.items.size() - 1),
                        containers_.empty() ? -1 : containers_.back()});
    return p_.spans.size() - 1;
  }
  void add_void(xmlNode* n, xmlNode* wrap) { open(Kind::kVoid, n, wrap); }

  void run(xmlNode* r) {
    const bool formatted = child_element(r, W, "rPr") != nullptr;
    long leaf = -1;  // the open leaf span of this run's text
    auto text = [&](const std::string& t) {
      if (formatted && leaf < 0) leaf = static_cast<long>(open(Kind::kLeaf, r));
      p_.text += t;
    };
    auto close = [&] {
      if (leaf >= 0) p_.spans[static_cast<size_t>(leaf)].end = p_.text.size();
      leaf = -1;
    };
    for (xmlNode* c = r->children; c; c = c->next) {
      if (c->type != XML_ELEMENT_NODE || is_w(c, "rPr")) continue;
      if (is_w(c, "t")) {
        text(text_of(c));
      } else if (is_w(c, "tab")) {
        text("\t");
      } else if (line_break(c) || is_w(c, "cr")) {
        text("\n");
      } else {
        close();
        add_void(c, r);
      }
    }
    close();
  }

  InlineParagraph& p_;
  std::vector<int> containers_;  // the spans of the links (...) being read, innermost last
};

InlineParagraph collect(xmlNode* paragraph) {
  InlineParagraph p;
  p.element = paragraph;
  Collector collector(p);
  for (xmlNode* c = paragraph->children; c; c = c->next) {
    if (is_w(c, "pPr")) continue;  // the paragraph's properties stay first
    p.content.push_back(c);
    collector.inline_node(c);
  }
  return p;
}

xmlNode* shell(xmlNode* original) {
  xmlNode* copy = xmlDocCopyNode(original, original->doc, 2);  // attributes, no children
  if (is_w(original, "r")) {
    if (xmlNode* properties = child_element(original, W, "rPr")) {
      xmlAddChild(copy, xmlDocCopyNode(properties, original->doc, 1));
    }
  }
  return copy;
}

// Text in a run: w:t pieces, w:tab for "\t", w:br for "\n".
void add_text(xmlNode* parent, const std::string& text) {
  xmlDoc* doc = parent->doc;
  xmlNode* run = parent;
  if (!is_w(parent, "r")) {
    run = new_element(doc, W, "r");
    xmlAddChild(parent, run);
  }
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\t' && text[i] != '\n') continue;
    if (i > start) {
      xmlNode* t = new_element(doc, W, "t");
      xmlNodeSetSpacePreserve(t, 1);
      xmlAddChild(t, xmlNewDocTextLen(doc, BAD_CAST text.data() + start, static_cast<int>(i - start)));
      xmlAddChild(run, t);
    }
    if (i < text.size()) xmlAddChild(run, new_element(doc, W, text[i] == '\t' ? "tab" : "br"));
    start = i + 1;
  }
}

std::vector<std::string> parts(const ZipArchive& archive) {
  std::vector<std::string> out = {"word/document.xml"};
  for (const char* kind : {"header", "footer"}) {
    for (std::string& n : numbered_entries(archive, std::string("word/") + kind, ".xml")) out.push_back(n);
  }
  for (const char* name : {"word/footnotes.xml", "word/endnotes.xml"}) {
    if (archive.find(name)) out.push_back(name);
  }
  return out;
}

}  // namespace

const OfficeFormat& docx_format() {
  static const OfficeFormat format{
      "Word document", "word/document.xml", parts,
      [](const xmlNode* n) { return is_w(n, "p"); }, collect, InlineFormat{shell, add_text}};
  return format;
}

}  // namespace nmt::server
