#pragma once
// Generated HTML snippets and what a test compares of their gumbo trees (test_html.cc with a
// computed translation, test_markup_server.cc through the server with the demo model).
#include <gumbo.h>

#include <random>
#include <set>
#include <string>

namespace nmt::markup::testing {

// HTML snippets from templates: blocks (p, div, h2, ul/li, table, blockquote, pre, script and
// style, translate="no") of inline content (words with entities, nested b/i/em/strong/u/sub/
// sup/mark, links, spans with attributes, void elements, code, translate="no", comments,
// abbr with a title). Valid HTML: gumbo parses each without an error.
struct HtmlSnippets {
  std::mt19937 rng{55};
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  std::string words() {
    static const char* w[] = {"two", "dogs", "play", "in", "the", "snow", "a", "man", "rides",
                              "bike", "caf\u00e9", "na\u00efve", "x&amp;y", "&lt;tag&gt;",
                              "1&nbsp;kg", "&eacute;t&eacute;", "&#169;", "&#x20AC;5"};
    std::string s;
    for (int n = 1 + pick(3); n-- > 0;) s += std::string(s.empty() ? "" : " ") + w[pick(18)];
    return s;
  }

  std::string inline_content(int depth, bool in_link = false) {
    std::string s;
    for (int n = 1 + pick(4); n-- > 0;) {
      if (!s.empty() && pick(4)) s += ' ';
      const int kind = depth > 3 ? 0 : pick(12);
      static const char* tags[] = {"b", "i", "em", "strong", "u", "sub", "sup", "mark"};
      switch (kind) {
        case 0: case 1: case 2: s += words(); break;
        case 3: case 4: {
          const std::string t = tags[pick(8)];
          s += "<" + t + ">" + inline_content(depth + 1, in_link) + "</" + t + ">";
          break;
        }
        case 5:  // links do not nest
          if (in_link) s += words();
          else s += "<a href=\"https://x.test/?a=1&amp;b=2\" title=\"go there\">" + inline_content(depth + 1, true) + "</a>";
          break;
        case 6: s += "<span class=\"c\" data-x='\"q\"'>" + inline_content(depth + 1, in_link) + "</span>"; break;
        case 7: {
          static const char* v[] = {"<br>", "<img src=\"p.png\" alt=\"a small dog\">", "<wbr>",
                                    "<input placeholder=\"your name\">"};
          s += v[pick(4)];
          break;
        }
        case 8: s += "<code>x &lt; y</code>"; break;
        case 9: s += "<span translate=\"no\">Acme <b>Corp</b></span>"; break;
        case 10: s += "<!-- note -->"; break;
        default: s += "<abbr title=\"the snow\">" + words() + "</abbr>"; break;
      }
    }
    return s;
  }

  std::string snippet() {
    std::string s;
    for (int n = 1 + pick(3); n-- > 0;) {
      switch (pick(10)) {
        case 0: s += "<p>" + inline_content(0) + "</p>"; break;
        case 1: s += "<div>" + inline_content(0) + "<p>" + inline_content(0) + "</p></div>"; break;
        case 2: s += "<h2 title=\"a heading\">" + inline_content(0) + "</h2>"; break;
        case 3: s += "<ul><li>" + inline_content(0) + "</li><li>" + inline_content(0) + "</li></ul>"; break;
        case 4: s += "<table><tbody><tr><td>" + inline_content(0) + "</td><td>" + inline_content(0) + "</td></tr></tbody></table>"; break;
        case 5: s += "<blockquote><p>" + inline_content(0) + "</p></blockquote>"; break;
        case 6: s += "<pre>kept  <b>as</b> is &amp;</pre>"; break;
        case 7: s += "<script>var a = \"<b>\" && 1;</script><style>p > b { }</style>"; break;
        case 8: s += "<div translate=\"no\">do <i>not</i> translate</div>"; break;
        default: s += "<p>" + inline_content(0) + "</p>\n"; break;
      }
    }
    return s;
  }
};

// A text parsed by gumbo as a fragment of a body.
struct GumboTree {
  explicit GumboTree(const std::string& html) : output(gumbo_parse_with_options(&options(), html.data(), html.size())) {}
  ~GumboTree() { gumbo_destroy_output(&options(), output); }
  static const GumboOptions& options() {
    static const GumboOptions o = [] {
      GumboOptions x = kGumboDefaultOptions;
      x.fragment_context = GUMBO_TAG_BODY;
      return x;
    }();
    return o;
  }
  GumboOutput* output;
};

inline bool translated_attribute(const std::string& name) {
  return name == "alt" || name == "title" || name == "placeholder";
}

// Every element as "tag attr=value ..." (translated attributes by name only), and each text
// of what is kept as it is (kept elements move with the alignments: compared as sets).
inline void inventory(const GumboNode* n, bool kept, std::multiset<std::string>& elements,
               std::multiset<std::string>& kept_text) {
  if (n->type == GUMBO_NODE_TEXT || n->type == GUMBO_NODE_WHITESPACE) {
    if (kept) kept_text.insert(n->v.text.text);
    return;
  }
  if (n->type != GUMBO_NODE_ELEMENT) return;
  std::string e = gumbo_normalized_tagname(n->v.element.tag);
  bool keep = kept || n->v.element.tag == GUMBO_TAG_PRE || n->v.element.tag == GUMBO_TAG_CODE ||
              n->v.element.tag == GUMBO_TAG_SCRIPT || n->v.element.tag == GUMBO_TAG_STYLE;
  for (unsigned a = 0; a < n->v.element.attributes.length; ++a) {
    const auto* attr = static_cast<const GumboAttribute*>(n->v.element.attributes.data[a]);
    e += std::string(" ") + attr->name;
    if (!translated_attribute(attr->name) || keep) e += std::string("=") + attr->value;
    if (std::string(attr->name) == "translate") keep = true;
  }
  elements.insert(e);
  for (unsigned k = 0; k < n->v.element.children.length; ++k)
    inventory(static_cast<const GumboNode*>(n->v.element.children.data[k]), keep, elements, kept_text);
}

}  // namespace nmt::markup::testing
