// PowerPoint presentations (.pptx, PresentationML with DrawingML text): the paragraphs
// (a:p) of every slide and its speaker notes, slides in their number's order. Every run
// (a:r: its a:rPr, bold, italic, size, and its a:t) is a leaf span; a:br, fields (a:fld: a
// slide number) and anything else inline are voids kept as they are. The paragraph's
// properties (a:pPr) stay first and its end properties (a:endParaRPr) last.
#include "server/documents/office/office_package.h"
#include "server/documents/office/xml_tree.h"

namespace nmt::server {
namespace {

constexpr const char* A = "http://schemas.openxmlformats.org/drawingml/2006/main";
using Kind = InlineItem::Kind;

bool is_a(const xmlNode* n, const char* local) { return is_element(n, A, local); }

InlineParagraph collect(xmlNode* paragraph) {
  InlineParagraph p;
  p.element = paragraph;
  for (xmlNode* c = paragraph->children; c; c = c->next) {
    if (is_a(c, "pPr")) continue;
    if (is_a(c, "endParaRPr")) {
      p.before = c;
      continue;
    }
    p.content.push_back(c);
    if (c->type != XML_ELEMENT_NODE) continue;
    const bool run = is_a(c, "r");
    p.items.push_back({run ? Kind::kLeaf : Kind::kVoid, c, nullptr});
    const size_t begin = p.text.size();
    if (run) {
      if (xmlNode* t = child_element(c, A, "t")) p.text += text_of(t);
    }
    p.spans.push_back({begin, p.text.size(), static_cast<int>(p.items.size() - 1)});
  }
  return p;
}

xmlNode* shell(xmlNode* original) {
  xmlNode* copy = xmlDocCopyNode(original, original->doc, 2);
  if (xmlNode* properties = child_element(original, A, "rPr")) {
    xmlAddChild(copy, xmlDocCopyNode(properties, original->doc, 1));
  }
  return copy;
}

void add_text(xmlNode* parent, const std::string& text) {
  xmlDoc* doc = parent->doc;
  xmlNode* run = parent;
  if (!is_a(parent, "r")) {
    run = new_element(doc, A, "r");
    xmlAddChild(parent, run);
  }
  xmlNode* t = child_element(run, A, "t");
  if (!t) {
    t = new_element(doc, A, "t");
    xmlAddChild(run, t);
  }
  xmlAddChild(t, xmlNewDocTextLen(doc, BAD_CAST text.data(), static_cast<int>(text.size())));
}

std::vector<std::string> parts(const ZipArchive& archive) {
  std::vector<std::string> out = numbered_entries(archive, "ppt/slides/slide", ".xml");
  for (std::string& n : numbered_entries(archive, "ppt/notesSlides/notesSlide", ".xml")) out.push_back(n);
  return out;
}

}  // namespace

const OfficeFormat& pptx_format() {
  static const OfficeFormat format{
      "PowerPoint presentation", "ppt/presentation.xml", parts,
      [](const xmlNode* n) { return is_a(n, "p"); }, collect, InlineFormat{shell, add_text}};
  return format;
}

}  // namespace nmt::server
