#include "server/documents/office/inline_runs.h"

#include <algorithm>
#include <tuple>

#include "server/markup/span_transfer.h"

namespace nmt::server {
namespace {

using Kind = InlineItem::Kind;

// Every element and attribute of `node`'s subtree that uses `from` uses `to` instead.
void retarget(xmlNode* node, const xmlNs* from, xmlNs* to) {
  std::vector<xmlNode*> stack = {node};
  while (!stack.empty()) {
    xmlNode* n = stack.back();
    stack.pop_back();
    if (n->type != XML_ELEMENT_NODE) continue;
    if (n->ns == from) n->ns = to;
    for (xmlAttr* a = n->properties; a; a = a->next) {
      if (a->ns == from) a->ns = to;
    }
    for (xmlNode* c = n->children; c; c = c->next) stack.push_back(c);
  }
}

// Drops the namespace declarations in `top`'s subtree that repeat one in scope above them
// (copies made outside the tree declare the namespaces they use; in place the document's
// declarations serve), pointing their users at the one in scope.
void drop_repeated_namespaces(xmlNode* top) {
  std::vector<xmlNode*> stack = {top};
  while (!stack.empty()) {
    xmlNode* e = stack.back();
    stack.pop_back();
    if (e->type != XML_ELEMENT_NODE) continue;
    for (xmlNs** link = &e->nsDef; *link;) {
      xmlNs* d = *link;
      xmlNs* outer = e->parent ? xmlSearchNs(e->doc, e->parent, d->prefix) : nullptr;
      if (outer && xmlStrEqual(outer->href, d->href)) {
        retarget(e, d, outer);
        *link = d->next;
        d->next = nullptr;
        xmlFreeNs(d);
      } else {
        link = &d->next;
      }
    }
    for (xmlNode* c = e->children; c; c = c->next) stack.push_back(c);
  }
}

}  // namespace

std::vector<InlineSpan> place_spans(const InlineParagraph& p, const TranslatedText& t) {
  std::vector<markup::Span> spans;
  for (const InlineSpan& s : p.spans) spans.push_back({{s.begin, s.end}, s.parent, s.id});
  std::vector<markup::AlignmentLink> links;
  for (const AlignedRange& a : t.alignments) {
    links.push_back({{a.source_begin, a.source_end}, {a.target_begin, a.target_end}});
  }
  std::vector<InlineSpan> placed;
  for (const markup::Span& s : markup::transfer_spans(p.text, spans, t.text, links)) {
    placed.push_back({s.range.begin, s.range.end, s.id, s.parent});
  }
  return placed;
}

namespace {

// Each span's children (index 0: the top level's, i + 1: span i's) in the order
// markup::children_in_order gives them (by begin, then end, then index), all at once: one
// call per span would be quadratic in a paragraph of many runs.
std::vector<std::vector<int>> children_of(const std::vector<InlineSpan>& placed) {
  std::vector<std::vector<int>> children(placed.size() + 1);
  for (size_t i = 0; i < placed.size(); ++i) children[static_cast<size_t>(placed[i].parent + 1)].push_back(static_cast<int>(i));
  for (std::vector<int>& c : children) {
    std::sort(c.begin(), c.end(), [&](int a, int b) {
      const InlineSpan& x = placed[static_cast<size_t>(a)];
      const InlineSpan& y = placed[static_cast<size_t>(b)];
      return std::tie(x.begin, x.end, a) < std::tie(y.begin, y.end, b);
    });
  }
  return children;
}

// Writes `text` [begin, end) under `parent` with the spans that are children of `span`
// (-1: the paragraph's top level), in the order they come in the target.
void write_range(xmlNode* parent, int span, size_t begin, size_t end, const std::string& text,
                 const std::vector<InlineSpan>& placed, const std::vector<std::vector<int>>& children,
                 const InlineParagraph& p, const InlineFormat& format) {
  size_t pos = begin;
  for (const int child : children[static_cast<size_t>(span + 1)]) {
    const InlineSpan& c = placed[static_cast<size_t>(child)];
    if (c.begin > pos) format.add_text(parent, text.substr(pos, c.begin - pos));
    pos = std::max(pos, c.end);
    const InlineItem& item = p.items[static_cast<size_t>(c.id)];
    if (item.kind == Kind::kVoid) {
      xmlUnlinkNode(item.node);
      xmlNode* node = item.node;
      if (item.wrap) {
        node = format.shell(item.wrap);
        xmlAddChild(node, item.node);
      }
      xmlAddChild(parent, node);
      continue;
    }
    if (item.kind == Kind::kLeaf && c.begin == c.end) continue;  // a run left without words
    xmlNode* shell = format.shell(item.node);
    xmlAddChild(parent, shell);
    write_range(shell, child, c.begin, c.end, text, placed, children, p, format);
  }
  if (end > pos) format.add_text(parent, text.substr(pos, end - pos));
}

}  // namespace

void rebuild_paragraph(InlineParagraph& p, const std::string& text, const std::vector<InlineSpan>& placed,
                       const InlineFormat& format) {
  for (xmlNode* n : p.content) xmlUnlinkNode(n);
  // Built in a detached holder, then moved into the paragraph before `before`.
  xmlNode* holder = xmlNewDocNode(p.element->doc, nullptr, BAD_CAST "holder", nullptr);
  write_range(holder, -1, 0, text.size(), text, placed, children_of(placed), p, format);
  for (xmlNode* c = holder->children; c;) {
    xmlNode* next = c->next;
    xmlUnlinkNode(c);
    if (p.before) {
      xmlAddPrevSibling(p.before, c);
    } else {
      xmlAddChild(p.element, c);
    }
    if (c->type == XML_ELEMENT_NODE) drop_repeated_namespaces(c);
    c = next;
  }
  xmlFreeNode(holder);
  // The old content, less the voids moved out of it into the new.
  for (xmlNode* n : p.content) {
    const bool moved = std::any_of(p.items.begin(), p.items.end(),
                                   [&](const InlineItem& i) { return i.kind == Kind::kVoid && i.node == n; });
    if (!moved) xmlFreeNode(n);
  }
  p.content.clear();
}

}  // namespace nmt::server
