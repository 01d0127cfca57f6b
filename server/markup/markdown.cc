#include "server/markup/markdown.h"

#include <cmark.h>

#include <cctype>
#include <map>
#include <string_view>

#include "model/error.h"

namespace nmt::markup {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

bool leaf(cmark_node_type t) {
  switch (t) {
    case CMARK_NODE_TEXT: case CMARK_NODE_CODE: case CMARK_NODE_HTML_INLINE:
    case CMARK_NODE_SOFTBREAK: case CMARK_NODE_LINEBREAK: case CMARK_NODE_THEMATIC_BREAK:
    case CMARK_NODE_CODE_BLOCK: case CMARK_NODE_HTML_BLOCK:
      return true;
    default:
      return false;
  }
}

// Spans whose content is translated in the sentence; any other inline node is kept as it is
// (a void span). An image's description is not words of the sentence but its own text (its
// alt, as HTML's alt attribute is): the image is a void span and its alt a block of its own.
bool spanning(cmark_node_type t) {
  return t == CMARK_NODE_EMPH || t == CMARK_NODE_STRONG || t == CMARK_NODE_LINK;
}

// Text appended with whitespace collapsed to one space, none at the start.
void append_collapsed(std::string& out, const char* p) {
  for (; *p; ++p) {
    if (!is_space(*p)) out += *p;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
}

// An image's description as plain text (what CommonMark renders as its alt).
std::string alt_text(cmark_node* image) {
  std::string alt;
  cmark_iter* it = cmark_iter_new(image);
  for (cmark_event_type ev; (ev = cmark_iter_next(it)) != CMARK_EVENT_DONE;) {
    cmark_node* n = cmark_iter_get_node(it);
    const cmark_node_type t = cmark_node_get_type(n);
    if (ev != CMARK_EVENT_ENTER) continue;
    if (t == CMARK_NODE_TEXT || t == CMARK_NODE_CODE) append_collapsed(alt, cmark_node_get_literal(n));
    if ((t == CMARK_NODE_SOFTBREAK || t == CMARK_NODE_LINEBREAK) && !alt.empty() && alt.back() != ' ') alt += ' ';
  }
  cmark_iter_free(it);
  if (!alt.empty() && alt.back() == ' ') alt.pop_back();
  return alt;
}

// Whether inline node `n` is followed by whitespace in the source.
bool space_after(cmark_node* n) {
  cmark_node* next = cmark_node_next(n);
  if (!next) return false;
  const cmark_node_type t = cmark_node_get_type(next);
  if (t == CMARK_NODE_SOFTBREAK || t == CMARK_NODE_LINEBREAK) return true;
  return t == CMARK_NODE_TEXT && is_space(*cmark_node_get_literal(next));
}

struct NodeFree {
  void operator()(cmark_node* n) const { cmark_node_free(n); }
};
using Tree = std::unique_ptr<cmark_node, NodeFree>;

Tree parse(const std::string& text) {
  return Tree(cmark_parse_document(text.data(), text.size(), CMARK_OPT_DEFAULT));
}

// A link's or image's title, an image's alt: translated as a block of its own.
struct Attribute {
  cmark_node* node = nullptr;
  bool alt = false;  // else the title
  Block block;
};

// A paragraph or heading: its block, the inline node of each span id, whether each void span
// stood apart from its words (span_transfer.h, spaces_beside), its attributes' blocks.
struct Found {
  cmark_node* container = nullptr;
  Block block;
  std::vector<cmark_node*> span_nodes;
  std::vector<Apart> apart;
  std::vector<Attribute> attributes;
  // A raw HTML start tag's span: its end tag (cmark keeps them as two nodes; they move
  // together, around what was between them).
  std::map<cmark_node*, cmark_node*> html_end;
};

// "<b ...>" -> "b", "</b>" -> "/b"; "" for anything else (comments, self-closing tags).
std::string html_tag(cmark_node* n) {
  if (cmark_node_get_type(n) != CMARK_NODE_HTML_INLINE) return "";
  std::string_view s(cmark_node_get_literal(n));
  if (s.size() < 3 || s[0] != '<' || s.back() != '>' || s[s.size() - 2] == '/') return "";
  std::size_t i = 1;
  std::string name = s[1] == '/' ? "/" : "";
  if (s[1] == '/') ++i;
  for (; i < s.size() && std::isalnum(static_cast<unsigned char>(s[i])); ++i)
    name += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
  return name.empty() || name == "/" ? "" : name;
}

// The sibling after `open` that ends it, at the same level, or null.
cmark_node* matching_end(cmark_node* open) {
  const std::string name = html_tag(open);
  if (name.empty() || name[0] == '/') return nullptr;
  int depth = 0;
  for (cmark_node* n = cmark_node_next(open); n; n = cmark_node_next(n)) {
    const std::string t = html_tag(n);
    if (t == name) ++depth;
    if (t == "/" + name && depth-- == 0) return n;
  }
  return nullptr;
}

void walk(cmark_node* n, int parent, Found& f);

// The inline nodes from `first` up to (not including) `stop`.
void walk_siblings(cmark_node* first, cmark_node* stop, int parent, Found& f) {
  for (cmark_node* c = first; c && c != stop; c = cmark_node_next(c)) {
    cmark_node* end = matching_end(c);
    if (!end) {
      walk(c, parent, f);
      continue;
    }
    const int id = static_cast<int>(f.span_nodes.size());
    f.span_nodes.push_back(c);
    f.apart.push_back({});
    f.html_end[c] = end;
    f.block.spans.push_back({{f.block.text.size(), f.block.text.size()}, parent, id});
    walk_siblings(cmark_node_next(c), end, id, f);
    f.block.spans[id].range.end = f.block.text.size();
    c = end;
  }
}

void walk(cmark_node* n, int parent, Found& f) {
  const cmark_node_type t = cmark_node_get_type(n);
  if (t == CMARK_NODE_TEXT) {
    append_collapsed(f.block.text, cmark_node_get_literal(n));
    return;
  }
  if (t == CMARK_NODE_SOFTBREAK) {
    if (!f.block.text.empty() && f.block.text.back() != ' ') f.block.text += ' ';
    return;
  }
  const int id = static_cast<int>(f.span_nodes.size());
  f.span_nodes.push_back(n);
  f.apart.push_back({!f.block.text.empty() && f.block.text.back() == ' ', space_after(n)});
  f.block.spans.push_back({{f.block.text.size(), f.block.text.size()}, parent, id});
  if (t == CMARK_NODE_LINK || t == CMARK_NODE_IMAGE) {
    if (t == CMARK_NODE_IMAGE) {
      Attribute alt{n, true, {alt_text(n), {}}};
      if (!alt.block.text.empty()) f.attributes.push_back(std::move(alt));
    }
    Attribute title{n, false, {}};
    append_collapsed(title.block.text, cmark_node_get_title(n));
    if (!title.block.text.empty() && title.block.text.back() == ' ') title.block.text.pop_back();
    if (!title.block.text.empty()) f.attributes.push_back(std::move(title));
  }
  if (spanning(t)) walk_siblings(cmark_node_first_child(n), nullptr, id, f);
  f.block.spans[id].range.end = f.block.text.size();
  // A hard line break separates words like the whitespace it stands for.
  if (t == CMARK_NODE_LINEBREAK && !f.block.text.empty() && f.block.text.back() != ' ') f.block.text += ' ';
}

// Every paragraph and heading with text to translate, in document order.
std::vector<Found> find_blocks(cmark_node* root) {
  std::vector<Found> found;
  cmark_iter* it = cmark_iter_new(root);
  for (cmark_event_type ev; (ev = cmark_iter_next(it)) != CMARK_EVENT_DONE;) {
    cmark_node* n = cmark_iter_get_node(it);
    const cmark_node_type t = cmark_node_get_type(n);
    if (ev != CMARK_EVENT_ENTER || (t != CMARK_NODE_PARAGRAPH && t != CMARK_NODE_HEADING)) continue;
    Found f;
    f.container = n;
    walk_siblings(cmark_node_first_child(n), nullptr, -1, f);
    std::string& text = f.block.text;
    if (!text.empty() && text.back() == ' ') text.pop_back();
    for (Span& s : f.block.spans)
      s.range = {std::min(s.range.begin, text.size()), std::min(s.range.end, text.size())};
    if (!text.empty() || !f.attributes.empty()) found.push_back(std::move(f));
  }
  cmark_iter_free(it);
  return found;
}

cmark_node* text_node(std::string_view text) {
  cmark_node* n = cmark_node_new(CMARK_NODE_TEXT);
  cmark_node_set_literal(n, std::string(text).c_str());
  return n;
}

// A copy of inline node `n` without its children (an image with its alt as one text).
cmark_node* shallow_copy(cmark_node* n) {
  const cmark_node_type t = cmark_node_get_type(n);
  cmark_node* c = cmark_node_new(t);
  if (t == CMARK_NODE_LINK || t == CMARK_NODE_IMAGE) {
    cmark_node_set_url(c, cmark_node_get_url(n));
    cmark_node_set_title(c, cmark_node_get_title(n));
  }
  if (t == CMARK_NODE_IMAGE) {
    const std::string alt = alt_text(n);
    if (!alt.empty()) cmark_node_append_child(c, text_node(alt));
  } else if (t == CMARK_NODE_CODE || t == CMARK_NODE_HTML_INLINE) {
    cmark_node_set_literal(c, cmark_node_get_literal(n));
  }
  return c;
}

cmark_node* html_node(const char* literal) {
  cmark_node* n = cmark_node_new(CMARK_NODE_HTML_INLINE);
  cmark_node_set_literal(n, literal);
  return n;
}

// The inline nodes a block's spans make, by type (cmark_node_get_type_string), an emphasis
// written as raw HTML counted as the emphasis.
using Census = std::map<std::string, int>;

void count_inlines(cmark_node* root, Census& census) {
  cmark_iter* it = cmark_iter_new(root);
  for (cmark_event_type ev; (ev = cmark_iter_next(it)) != CMARK_EVENT_DONE;) {
    cmark_node* n = cmark_iter_get_node(it);
    const cmark_node_type t = cmark_node_get_type(n);
    if (ev != CMARK_EVENT_ENTER || t == CMARK_NODE_TEXT || t == CMARK_NODE_SOFTBREAK ||
        t == CMARK_NODE_DOCUMENT || t == CMARK_NODE_PARAGRAPH || t == CMARK_NODE_HEADING)
      continue;
    const std::string html = t == CMARK_NODE_HTML_INLINE ? cmark_node_get_literal(n) : "";
    if (html == "</em>" || html == "</strong>") continue;
    ++census[html == "<em>" ? "emph" : html == "<strong>" ? "strong" : cmark_node_get_type_string(n)];
  }
  cmark_iter_free(it);
}

// build() writes emphasis as Markdown, or (when that would not read back as written: two
// delimiter runs side by side, "*a***b**") as raw HTML, which CommonMark always reads back.
void build(cmark_node* into, const Found& f, const std::vector<Span>& placed, std::string_view text,
           int parent, std::size_t begin, std::size_t end, bool html_emphasis) {
  std::size_t at = begin;
  cmark_node_type last = CMARK_NODE_NONE;  // the node just appended, when nothing came between
  for (int c : children_in_order(placed, parent)) {
    const ByteRange r = placed[c].range;
    if (r.begin > at) {
      cmark_node_append_child(into, text_node(text.substr(at, r.begin - at)));
      last = CMARK_NODE_TEXT;
    }
    cmark_node* original = f.span_nodes[placed[c].id];
    const cmark_node_type t = cmark_node_get_type(original);
    // Two code spans side by side would read as one: a space between them.
    if (t == CMARK_NODE_CODE && last == CMARK_NODE_CODE) cmark_node_append_child(into, text_node(" "));
    if (auto pair = f.html_end.find(original); pair != f.html_end.end()) {
      cmark_node_append_child(into, shallow_copy(original));
      build(into, f, placed, text, c, r.begin, r.end, html_emphasis);
      cmark_node_append_child(into, shallow_copy(pair->second));
    } else if ((t == CMARK_NODE_EMPH || t == CMARK_NODE_STRONG) &&
               (html_emphasis || (r.begin == r.end && children_in_order(placed, c).empty()))) {
      // CommonMark has no empty emphasis ("**" is text): one whose words all went elsewhere
      // is written as the raw HTML element it stands for, as is every emphasis of a block
      // whose Markdown would not read back.
      const bool em = t == CMARK_NODE_EMPH;
      cmark_node_append_child(into, html_node(em ? "<em>" : "<strong>"));
      build(into, f, placed, text, c, r.begin, r.end, html_emphasis);
      cmark_node_append_child(into, html_node(em ? "</em>" : "</strong>"));
    } else if (spanning(t)) {
      cmark_node* copy = shallow_copy(original);
      build(copy, f, placed, text, c, r.begin, r.end, html_emphasis);
      cmark_node_append_child(into, copy);
    } else {
      // Kept as it is: apart from the words beside it where it was in the source.
      const Apart spaces = spaces_beside(text, r.begin, f.apart[placed[c].id]);
      if (spaces.before) cmark_node_append_child(into, text_node(" "));
      cmark_node_append_child(into, shallow_copy(original));
      if (spaces.after) cmark_node_append_child(into, text_node(" "));
    }
    last = t;
    at = r.end;
  }
  if (end > at) cmark_node_append_child(into, text_node(text.substr(at, end - at)));
}

class MarkdownDocument final : public MarkupDocument {
 public:
  MarkdownDocument(const std::string& text, const MarkupBounds& bounds, const std::string& what)
      : text_(text) {
    Tree tree = parse(text_);
    check_depth(tree.get(), bounds, what);
    for (Found& f : find_blocks(tree.get())) {
      if (!f.block.text.empty()) blocks_.push_back(std::move(f.block));
      for (Attribute& a : f.attributes) blocks_.push_back(std::move(a.block));
    }
  }

  std::string render(const std::vector<TranslatedBlock>& translated) const override {
    if (translated.size() != blocks_.size())
      throw Error(ErrorCode::kInternal, "markup: " + std::to_string(translated.size()) +
                                            " translations for " + std::to_string(blocks_.size()) + " blocks");
    // A fresh tree of the same text: the same blocks in the same order, changed in place.
    Tree tree = parse(text_);
    std::vector<Found> found = find_blocks(tree.get());
    std::size_t next = 0;  // translated[] in the order of blocks_
    for (std::size_t i = 0; i < found.size(); ++i) {
      const TranslatedBlock* sentence = found[i].block.text.empty() ? nullptr : &translated[next++];
      // Attributes first: the paragraph's new inlines copy titles and alts from the originals.
      for (const Attribute& a : found[i].attributes) {
        const std::string& text = translated[next++].text;
        if (!a.alt) {
          cmark_node_set_title(a.node, text.c_str());
          continue;
        }
        while (cmark_node* old = cmark_node_first_child(a.node)) cmark_node_free(old);
        cmark_node_append_child(a.node, text_node(text));
      }
      if (!sentence) continue;
      const std::vector<Span> placed =
          transfer_spans(found[i].block.text, found[i].block.spans, sentence->text, sentence->links);
      Census expected;
      for (cmark_node* n : found[i].span_nodes) {
        expected[cmark_node_get_type_string(n)] += found[i].html_end.count(n) ? 2 : 1;
      }
      // The new inlines are built before the old ones go: span_nodes point into them.
      cmark_node* fresh = nullptr;
      for (bool html_emphasis : {false, true}) {
        if (fresh) cmark_node_free(fresh);
        fresh = cmark_node_new(CMARK_NODE_PARAGRAPH);
        build(fresh, found[i], placed, sentence->text, -1, 0, sentence->text.size(), html_emphasis);
        char* written = cmark_render_commonmark(fresh, CMARK_OPT_DEFAULT, 0);
        Tree back = parse(written);
        free(written);
        Census census;
        count_inlines(back.get(), census);
        if (census == expected) break;
      }
      while (cmark_node* old = cmark_node_first_child(found[i].container)) cmark_node_free(old);
      while (cmark_node* c = cmark_node_first_child(fresh)) {
        cmark_node_unlink(c);
        cmark_node_append_child(found[i].container, c);
      }
      cmark_node_free(fresh);
    }
    char* rendered = cmark_render_commonmark(tree.get(), CMARK_OPT_DEFAULT, 0);
    std::string out(rendered);
    free(rendered);
    return out;
  }

 private:
  static void check_depth(cmark_node* root, const MarkupBounds& bounds, const std::string& what) {
    cmark_iter* it = cmark_iter_new(root);
    int depth = 0;
    for (cmark_event_type ev; (ev = cmark_iter_next(it)) != CMARK_EVENT_DONE;) {
      if (leaf(cmark_node_get_type(cmark_iter_get_node(it)))) continue;
      depth += ev == CMARK_EVENT_ENTER ? 1 : -1;
      if (depth > bounds.max_depth + 1) {  // the document node is not nesting
        cmark_iter_free(it);
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": Markdown blocks and inlines nest deeper than " +
                        std::to_string(bounds.max_depth) + " (limits.max_markup_depth)");
      }
    }
    cmark_iter_free(it);
  }

  std::string text_;
};

}  // namespace

std::unique_ptr<MarkupDocument> parse_markdown(const std::string& text, const MarkupBounds& bounds,
                                               const std::string& what) {
  return std::make_unique<MarkdownDocument>(text, bounds, what);
}

}  // namespace nmt::markup
