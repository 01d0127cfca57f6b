#pragma once
// A paragraph of an office document as text plus inline spans, and back: the formatting runs
// (docx w:r with w:rPr, pptx a:r, odt text:span), links (w:hyperlink, text:a) and inline
// objects (bookmarks, fields, frames, breaks: void, kept as they are) become byte ranges of
// the paragraph's text; the paragraph is translated whole, the spans placed on its
// translation (server/markup/span_transfer through the word alignments) and the paragraph's
// inline content rebuilt from them, so that a bold word's translation stays bold.
#include <libxml/tree.h>

#include <functional>
#include <string>
#include <vector>

#include "server/documents/document.h"

namespace nmt::server {

// [begin, end) of a text, naming item `id` of its paragraph, inside span `parent` (an
// earlier index of the same vector; -1: the paragraph itself).
struct InlineSpan {
  size_t begin, end;
  int id;
  int parent = -1;
};

struct InlineItem {
  enum class Kind {
    kContainer,  // holds text and other items (text:span, text:a, w:hyperlink)
    kLeaf,       // holds text only (w:r, a:r): never another item (its voids are siblings)
    kVoid,       // holds no text: moved to its place as it is (a bookmark, a field, a frame)
  };
  Kind kind;
  // Container, leaf: the element copied (without its text) around the item's text. Void: the
  // node moved, or, with `wrap`, moved into a copy of `wrap` (a docx run's field code keeps
  // its run's properties).
  xmlNode* node;
  xmlNode* wrap = nullptr;
};

struct InlineParagraph {
  xmlNode* element = nullptr;     // w:p, a:p, text:p
  xmlNode* before = nullptr;      // inline content goes before this child (a:endParaRPr), or last
  std::vector<xmlNode*> content;  // the inline children the text came from (replaced)
  std::string text;
  std::vector<InlineSpan> spans;  // preorder: a parent before its children
  std::vector<InlineItem> items;  // spans[i].id indexes these
};

// How one format writes a paragraph's inline content.
struct InlineFormat {
  // An empty copy of a container's or leaf's element (its properties kept, its text not).
  std::function<xmlNode*(xmlNode* original)> shell;
  // Appends `text` under `parent` (the paragraph, or a shell): text nodes or the format's
  // text elements, tabs and line breaks as the format writes them.
  std::function<void(xmlNode* parent, const std::string& text)> add_text;
};

// The spans of `paragraph` on `translation` (server/markup/span_transfer.h): the same
// spans, parents and ids, each once, children inside parents, siblings apart. Throws
// nmt::Error (kInvalidArgument) for alignments outside the texts.
std::vector<InlineSpan> place_spans(const InlineParagraph& paragraph, const TranslatedText& translation);

// Replaces the paragraph's inline content by `text` with `placed` spans (each item once).
void rebuild_paragraph(InlineParagraph& paragraph, const std::string& text,
                       const std::vector<InlineSpan>& placed, const InlineFormat& format);

}  // namespace nmt::server
