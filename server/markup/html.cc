#include "server/markup/html.h"

#include <gumbo.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "model/error.h"

namespace nmt::markup {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// Phrasing content that may sit inside a sentence (HTML's inline elements); any other
// element starts a block of its own.
bool inline_tag(GumboTag tag) {
  switch (tag) {
    case GUMBO_TAG_A: case GUMBO_TAG_ABBR: case GUMBO_TAG_B: case GUMBO_TAG_BDI:
    case GUMBO_TAG_BDO: case GUMBO_TAG_BIG: case GUMBO_TAG_BR: case GUMBO_TAG_CITE:
    case GUMBO_TAG_CODE: case GUMBO_TAG_DATA: case GUMBO_TAG_DEL: case GUMBO_TAG_DFN:
    case GUMBO_TAG_EM: case GUMBO_TAG_FONT: case GUMBO_TAG_I: case GUMBO_TAG_IMG:
    case GUMBO_TAG_INPUT: case GUMBO_TAG_INS: case GUMBO_TAG_KBD: case GUMBO_TAG_LABEL:
    case GUMBO_TAG_MARK: case GUMBO_TAG_Q: case GUMBO_TAG_S: case GUMBO_TAG_SAMP:
    case GUMBO_TAG_SMALL: case GUMBO_TAG_SPAN: case GUMBO_TAG_STRIKE: case GUMBO_TAG_STRONG:
    case GUMBO_TAG_SUB: case GUMBO_TAG_SUP: case GUMBO_TAG_TIME: case GUMBO_TAG_TT:
    case GUMBO_TAG_U: case GUMBO_TAG_VAR: case GUMBO_TAG_WBR: case GUMBO_TAG_SCRIPT:
    case GUMBO_TAG_STYLE: case GUMBO_TAG_BUTTON: case GUMBO_TAG_NOSCRIPT:
      return true;
    default:
      return false;
  }
}

bool void_tag(GumboTag tag) {
  switch (tag) {
    case GUMBO_TAG_AREA: case GUMBO_TAG_BASE: case GUMBO_TAG_BR: case GUMBO_TAG_COL:
    case GUMBO_TAG_EMBED: case GUMBO_TAG_HR: case GUMBO_TAG_IMG: case GUMBO_TAG_INPUT:
    case GUMBO_TAG_KEYGEN: case GUMBO_TAG_LINK: case GUMBO_TAG_META: case GUMBO_TAG_PARAM:
    case GUMBO_TAG_SOURCE: case GUMBO_TAG_TRACK: case GUMBO_TAG_WBR: case GUMBO_TAG_BASEFONT:
    case GUMBO_TAG_BGSOUND: case GUMBO_TAG_FRAME:
      return true;
    default:
      return false;
  }
}

// Text written as it is inside these (HTML's raw text elements).
bool raw_text_tag(GumboTag tag) {
  return tag == GUMBO_TAG_SCRIPT || tag == GUMBO_TAG_STYLE || tag == GUMBO_TAG_XMP ||
         tag == GUMBO_TAG_IFRAME || tag == GUMBO_TAG_NOEMBED || tag == GUMBO_TAG_NOFRAMES ||
         tag == GUMBO_TAG_PLAINTEXT || tag == GUMBO_TAG_NOSCRIPT;
}

bool element(const GumboNode* n) {
  return n->type == GUMBO_NODE_ELEMENT || n->type == GUMBO_NODE_TEMPLATE;
}

// Left untranslated with everything inside.
bool kept_as_is(const GumboNode* n) {
  if (!element(n)) return false;
  const GumboTag tag = n->v.element.tag;
  if (tag == GUMBO_TAG_SCRIPT || tag == GUMBO_TAG_STYLE || tag == GUMBO_TAG_CODE ||
      tag == GUMBO_TAG_PRE || tag == GUMBO_TAG_TEXTAREA || tag == GUMBO_TAG_NOSCRIPT)
    return true;
  const GumboAttribute* t = gumbo_get_attribute(&n->v.element.attributes, "translate");
  if (!t) return false;
  std::string v(t->value);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == "no";
}

bool translated_attribute(std::string_view name) {
  return name == "alt" || name == "title" || name == "placeholder";
}

std::string tag_name(const GumboNode* n) {
  const GumboElement& e = n->v.element;
  if (e.tag != GUMBO_TAG_UNKNOWN && e.tag_namespace == GUMBO_NAMESPACE_HTML)
    return gumbo_normalized_tagname(e.tag);
  GumboStringPiece piece = e.original_tag;
  gumbo_tag_from_original_text(&piece);
  std::string name(piece.data ? piece.data : "", piece.length);
  if (e.tag_namespace == GUMBO_NAMESPACE_SVG) {
    if (const char* svg = gumbo_normalize_svg_tagname(&piece)) return svg;
    return name;
  }
  if (name.empty() && e.tag != GUMBO_TAG_UNKNOWN) return gumbo_normalized_tagname(e.tag);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

void escape_into(std::string_view text, bool attribute, std::string& out) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '&') out += "&amp;";
    else if (c == '<' && !attribute) out += "&lt;";
    else if (c == '>' && !attribute) out += "&gt;";
    else if (c == '"' && attribute) out += "&quot;";
    else if (c == '\xC2' && i + 1 < text.size() && text[i + 1] == '\xA0') {
      out += "&nbsp;";
      ++i;
    } else out += c;
  }
}

// Elements whose start tag closes an open one of their kind (or whose end tag may be left
// out): they do not nest by repetition, so the scan below does not count them.
bool optional_end(std::string_view name) {
  static const char* names[] = {"p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup",
                                "thead", "tbody", "tfoot", "colgroup", "rb", "rt", "rp", "rtc",
                                "html", "head", "body"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

bool void_name(std::string_view name) {
  static const char* names[] = {"area", "base", "br", "col", "embed", "hr", "img", "input", "keygen",
                                "link", "meta", "param", "source", "track", "wbr", "basefont",
                                "bgsound", "frame", "image"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

// The nesting the tags of `text` ask for, as its start and end tags count it (void elements,
// self-closing tags, comments and raw text skipped). gumbo's tree builder takes time and
// memory quadratic in the depth of its stack of open elements (10,000 nested divs: seconds
// and most of a gigabyte), so a text is measured before gumbo sees it.
int tag_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  std::size_t i = 0;
  auto lower_name = [&](std::size_t from, std::size_t& to) {
    std::string name;
    to = from;
    while (to < text.size() && (std::isalnum(static_cast<unsigned char>(text[to])) || text[to] == '-' || text[to] == ':')) {
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(text[to])));
      ++to;
    }
    return name;
  };
  while ((i = text.find('<', i)) != std::string_view::npos) {
    if (text.substr(i, 4) == "<!--") {
      const std::size_t end = text.find("-->", i + 4);
      if (end == std::string_view::npos) break;
      i = end + 3;
      continue;
    }
    const bool closing = i + 1 < text.size() && text[i + 1] == '/';
    std::size_t name_end;
    const std::string name = lower_name(i + (closing ? 2 : 1), name_end);
    if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) {
      ++i;
      continue;
    }
    // The tag's end, past quoted attribute values.
    std::size_t j = name_end;
    char quote = 0;
    for (; j < text.size(); ++j) {
      if (quote) {
        if (text[j] == quote) quote = 0;
      } else if (text[j] == '"' || text[j] == '\'') {
        quote = text[j];
      } else if (text[j] == '>') {
        break;
      }
    }
    if (j >= text.size()) break;
    const bool self_closing = text[j - 1] == '/';
    i = j + 1;
    if (void_name(name) || optional_end(name)) continue;
    if (closing) {
      depth = std::max(0, depth - 1);
    } else if (!self_closing) {
      deepest = std::max(deepest, ++depth);
      if (name == "script" || name == "style" || name == "textarea" || name == "title" ||
          name == "xmp" || name == "plaintext" || name == "noscript" || name == "iframe") {
        // Raw text up to its end tag.
        std::size_t k = i;
        while ((k = text.find("</", k)) != std::string_view::npos) {
          std::size_t e;
          if (lower_name(k + 2, e) == name) break;
          k += 2;
        }
        if (k == std::string_view::npos) break;
        i = k;
      }
    }
  }
  return deepest;
}

// One run of inline content: consecutive children of one parent, translated as a block.
// Comments, code, translate="no" and void elements: written as they are, not around words.
bool written_as_is(const GumboNode* n) {
  return !element(n) || kept_as_is(n) || void_tag(n->v.element.tag);
}

struct Run {
  std::vector<const GumboNode*> nodes;
  std::vector<const GumboNode*> span_nodes;  // by span id
  std::vector<Apart> apart;                  // by span id: whitespace beside it as written
  std::string lead, trail;                   // the whitespace at the run's ends, as written
  std::size_t block = 0;
};

class HtmlDocument final : public MarkupDocument {
 public:
  HtmlDocument(const std::string& text, const MarkupBounds& bounds, const std::string& what)
      : text_(text) {
    std::size_t i = 0;
    while (i < text_.size() && is_space(text_[i])) ++i;
    std::string head = text_.substr(i, 9);
    std::transform(head.begin(), head.end(), head.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    fragment_ = !(head.rfind("<!doctype", 0) == 0 || head.rfind("<html", 0) == 0);
    if (tag_depth(text_) > bounds.max_depth) refuse_depth(bounds, what);
    options_ = kGumboDefaultOptions;
    if (fragment_) options_.fragment_context = GUMBO_TAG_BODY;
    output_ = gumbo_parse_with_options(&options_, text_.data(), text_.size());
    try {
      check_depth(bounds, what);
      collect(output_->document);
    } catch (...) {  // no destructor runs for a constructor that throws (found by fuzz_documents)
      gumbo_destroy_output(&options_, output_);
      throw;
    }
  }
  ~HtmlDocument() override { gumbo_destroy_output(&options_, output_); }

  std::string render(const std::vector<TranslatedBlock>& translated) const override {
    if (translated.size() != blocks_.size())
      throw Error(ErrorCode::kInternal, "markup: " + std::to_string(translated.size()) +
                                            " translations for " + std::to_string(blocks_.size()) + " blocks");
    Writer w{*this, translated, {}};
    if (fragment_) w.children(output_->root);
    else w.node(output_->document);
    return std::move(w.out);
  }

 private:
  // Iterative, so that a deep document is refused before anything recurses over it.
  void check_depth(const MarkupBounds& bounds, const std::string& what) const {
    std::vector<std::pair<const GumboNode*, int>> stack = {{output_->document, 0}};
    while (!stack.empty()) {
      auto [n, depth] = stack.back();
      stack.pop_back();
      // The elements gumbo adds around the text (html, and a document's body) do not count.
      if (element(n) && depth > bounds.max_depth + (fragment_ ? 1 : 2)) refuse_depth(bounds, what);
      const GumboVector* kids = n->type == GUMBO_NODE_DOCUMENT ? &n->v.document.children
                                : element(n)                  ? &n->v.element.children
                                                              : nullptr;
      if (!kids) continue;
      for (unsigned k = 0; k < kids->length; ++k)
        stack.push_back({static_cast<const GumboNode*>(kids->data[k]), depth + 1});
    }
  }

  [[noreturn]] static void refuse_depth(const MarkupBounds& bounds, const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, what + ": HTML elements nest deeper than " +
                                                 std::to_string(bounds.max_depth) + " (limits.max_markup_depth)");
  }

  static const GumboVector* children_of(const GumboNode* n) {
    if (n->type == GUMBO_NODE_DOCUMENT) return &n->v.document.children;
    if (element(n)) return &n->v.element.children;
    return nullptr;
  }

  // Inline: text, comments, and inline elements with only inline content inside.
  bool is_inline(const GumboNode* n) {
    if (!element(n)) return n->type != GUMBO_NODE_DOCUMENT;
    if (auto it = inline_.find(n); it != inline_.end()) return it->second;
    bool result = inline_tag(n->v.element.tag);
    if (result && !kept_as_is(n)) {
      const GumboVector* kids = children_of(n);
      for (unsigned k = 0; result && k < kids->length; ++k)
        result = is_inline(static_cast<const GumboNode*>(kids->data[k]));
    }
    // An element kept as it is with translate="no" sits inline when its tag does.
    return inline_[n] = result;
  }

  void add_attributes(const GumboNode* n) {
    const GumboVector& attrs = n->v.element.attributes;
    for (unsigned a = 0; a < attrs.length; ++a) {
      const auto* attr = static_cast<const GumboAttribute*>(attrs.data[a]);
      if (!translated_attribute(attr->name)) continue;
      std::string_view v(attr->value);
      const auto b = std::find_if(v.begin(), v.end(), [](char c) { return !is_space(c); });
      if (b == v.end()) continue;
      attribute_block_[attr] = blocks_.size();
      blocks_.push_back({std::string(v), {}});
    }
  }

  void collect(const GumboNode* n) {
    if (element(n)) {
      if (kept_as_is(n)) return;
      add_attributes(n);
    }
    const GumboVector* kids = children_of(n);
    if (!kids) return;
    std::vector<const GumboNode*> run;
    auto flush = [&] {
      if (!run.empty()) add_run(run);
      run.clear();
    };
    for (unsigned k = 0; k < kids->length; ++k) {
      const auto* child = static_cast<const GumboNode*>(kids->data[k]);
      if (is_inline(child)) {
        run.push_back(child);
      } else {
        flush();
        collect(child);
      }
    }
    flush();
  }

  // The run's text (whitespace collapsed: HTML renders a run of it as one space) and spans.
  void add_run(const std::vector<const GumboNode*>& nodes) {
    Run run;
    run.nodes = nodes;
    Block block;
    std::string raw;  // the run's text as written, for the whitespace at its ends
    // By span id: raw's size before and after the span.
    std::vector<std::size_t> raw_begin, raw_end;
    auto walk = [&](auto& self, const GumboNode* n, int parent) -> void {
      if (n->type == GUMBO_NODE_TEXT || n->type == GUMBO_NODE_WHITESPACE ||
          n->type == GUMBO_NODE_CDATA) {
        for (const char* p = n->v.text.text; *p; ++p) {
          raw += *p;
          if (!is_space(*p)) block.text += *p;
          else if (!block.text.empty() && block.text.back() != ' ') block.text += ' ';
        }
        return;
      }
      const int id = static_cast<int>(run.span_nodes.size());
      run.span_nodes.push_back(n);
      run.apart.push_back({!raw.empty() && is_space(raw.back()), false});
      raw_begin.push_back(raw.size());
      raw_end.push_back(0);
      block.spans.push_back({{block.text.size(), block.text.size()}, parent, id});
      if (element(n) && !kept_as_is(n)) {
        add_attributes(n);
        const GumboVector* kids = children_of(n);
        for (unsigned k = 0; k < kids->length; ++k)
          self(self, static_cast<const GumboNode*>(kids->data[k]), id);
      }
      block.spans[id].range.end = block.text.size();
      raw_end[id] = raw.size();
      // A line break separates words like the whitespace it usually stands for.
      if (element(n) && n->v.element.tag == GUMBO_TAG_BR && !block.text.empty() && block.text.back() != ' ')
        block.text += ' ';
    };
    // Attribute blocks of the run's elements come before the run's own block: number the run
    // after the walk.
    for (const GumboNode* n : nodes) walk(walk, n, -1);
    for (std::size_t id = 0; id < raw_end.size(); ++id)
      run.apart[id].after = raw_end[id] < raw.size() && is_space(raw[raw_end[id]]);
    const auto first = std::find_if(raw.begin(), raw.end(), [](char c) { return !is_space(c); });
    if (first == raw.end()) return;  // nothing to translate: written as it is
    // The run's own whitespace at its ends: not what lies between an element written as it is
    // and the words (that is the element's, Run::apart).
    std::size_t lead_end = first - raw.begin();
    const auto last = std::find_if(raw.rbegin(), raw.rend(), [](char c) { return !is_space(c); });
    std::size_t trail_begin = last.base() - raw.begin();
    for (std::size_t id = 0; id < raw_end.size(); ++id) {
      if (!written_as_is(run.span_nodes[id])) continue;
      lead_end = std::min(lead_end, raw_begin[id]);
      trail_begin = std::max(trail_begin, raw_end[id]);
    }
    run.lead = raw.substr(0, lead_end);
    run.trail = raw.substr(trail_begin);
    // Collapsing leaves at most one space at each end: trim it, spans clamped (a monotone map
    // keeps them nested and apart).
    const std::size_t cut = block.text.front() == ' ' ? 1 : 0;
    if (block.text.back() == ' ') block.text.pop_back();
    block.text.erase(0, cut);
    for (Span& s : block.spans) {
      auto clamp = [&](std::size_t x) { return std::min(x > cut ? x - cut : 0, block.text.size()); };
      s.range = {clamp(s.range.begin), clamp(s.range.end)};
    }
    run.block = blocks_.size();
    blocks_.push_back(std::move(block));
    run_of_first_node_[nodes.front()] = runs_.size();
    runs_.push_back(std::move(run));
  }

  struct Writer {
    const HtmlDocument& doc;
    const std::vector<TranslatedBlock>& translated;
    std::string out;

    void start_tag(const GumboNode* n) {
      out += '<';
      out += tag_name(n);
      const GumboVector& attrs = n->v.element.attributes;
      for (unsigned a = 0; a < attrs.length; ++a) {
        const auto* attr = static_cast<const GumboAttribute*>(attrs.data[a]);
        out += ' ';
        if (attr->attr_namespace == GUMBO_ATTR_NAMESPACE_NONE &&
            n->v.element.tag_namespace == GUMBO_NAMESPACE_HTML)
          out += attr->name;
        else
          out.append(attr->original_name.data, attr->original_name.length);
        out += "=\"";
        auto it = doc.attribute_block_.find(attr);
        escape_into(it == doc.attribute_block_.end() ? std::string_view(attr->value)
                                                     : std::string_view(translated[it->second].text),
                    true, out);
        out += '"';
      }
      out += '>';
    }

    void node(const GumboNode* n) {
      switch (n->type) {
        case GUMBO_NODE_DOCUMENT: {
          const GumboDocument& d = n->v.document;
          if (d.has_doctype) {
            out += "<!DOCTYPE ";
            out += d.name;
            if (*d.public_identifier) out += std::string(" PUBLIC \"") + d.public_identifier + "\"";
            if (*d.system_identifier)
              out += std::string(*d.public_identifier ? " \"" : " SYSTEM \"") + d.system_identifier + "\"";
            out += ">";
          }
          children(n);
          return;
        }
        case GUMBO_NODE_TEXT: case GUMBO_NODE_WHITESPACE: {
          const GumboNode* p = n->parent;
          if (p && element(p) && raw_text_tag(p->v.element.tag)) out += n->v.text.text;
          else escape_into(n->v.text.text, false, out);
          return;
        }
        case GUMBO_NODE_CDATA:
          out += "<![CDATA[";
          out += n->v.text.text;
          out += "]]>";
          return;
        case GUMBO_NODE_COMMENT:
          out += "<!--";
          out += n->v.text.text;
          out += "-->";
          return;
        case GUMBO_NODE_ELEMENT: case GUMBO_NODE_TEMPLATE:
          start_tag(n);
          if (void_tag(n->v.element.tag)) return;
          children(n);
          out += "</" + tag_name(n) + ">";
          return;
      }
    }

    void children(const GumboNode* n) {
      const GumboVector* kids = children_of(n);
      for (unsigned k = 0; k < kids->length;) {
        const auto* child = static_cast<const GumboNode*>(kids->data[k]);
        auto it = doc.run_of_first_node_.find(child);
        if (it == doc.run_of_first_node_.end()) {
          node(child);
          ++k;
          continue;
        }
        const Run& run = doc.runs_[it->second];
        write_run(run);
        k += static_cast<unsigned>(run.nodes.size());
      }
    }

    void write_run(const Run& run) {
      const Block& source = doc.blocks_[run.block];
      const TranslatedBlock& t = translated[run.block];
      const std::vector<Span> placed = transfer_spans(source.text, source.spans, t.text, t.links);
      out += run.lead;
      spans(run, placed, t.text, -1, 0, t.text.size());
      out += run.trail;
    }

    void spans(const Run& run, const std::vector<Span>& placed, const std::string& text, int parent,
               std::size_t begin, std::size_t end) {
      std::size_t at = begin;
      for (int c : children_in_order(placed, parent)) {
        const ByteRange r = placed[c].range;
        escape_into(std::string_view(text).substr(at, r.begin - at), false, out);
        const GumboNode* n = run.span_nodes[placed[c].id];
        if (written_as_is(n)) {
          // Comments, code, translate="no" as they were, and void elements: apart from the
          // words beside them where they were in the source.
          const Apart spaces = spaces_beside(text, r.begin, run.apart[placed[c].id]);
          if (spaces.before) out += ' ';
          if (!element(n) || kept_as_is(n)) node(n);
          else start_tag(n);
          if (spaces.after) out += ' ';
        } else {
          start_tag(n);
          spans(run, placed, text, c, r.begin, r.end);
          out += "</" + tag_name(n) + ">";
        }
        at = r.end;
      }
      escape_into(std::string_view(text).substr(at, end - at), false, out);
    }
  };

  std::string text_;
  bool fragment_ = true;
  GumboOptions options_;
  GumboOutput* output_ = nullptr;
  std::unordered_map<const GumboNode*, bool> inline_;
  std::vector<Run> runs_;
  std::unordered_map<const GumboNode*, std::size_t> run_of_first_node_;
  std::unordered_map<const GumboAttribute*, std::size_t> attribute_block_;
};

}  // namespace

std::unique_ptr<MarkupDocument> parse_html(const std::string& text, const MarkupBounds& bounds,
                                           const std::string& what) {
  return std::make_unique<HtmlDocument>(text, bounds, what);
}

}  // namespace nmt::markup
