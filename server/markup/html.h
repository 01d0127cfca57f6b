#pragma once
// HTML (TranslateOptions.format "html"), parsed with Debian's gumbo (libgumbo-dev: the HTML5
// parsing algorithm, so a page parses as a browser parses it, with the tree builder's own
// repair of unclosed and misnested tags) and written back here (gumbo has no serializer).
//
// Blocks: each run of inline content (text and inline elements: b, i, a, span, em, ...) of a
// block element (p, li, td, h1, div, ...), its inline elements as spans; and the values of
// alt, title and placeholder. Left as they are: script, style, code, pre, textarea, comments,
// and every element with translate="no" (inline ones stay where the alignments put them,
// like void elements). A fragment comes back a fragment; a text that starts with <!DOCTYPE or
// <html> comes back a whole document. Entities are decoded for translation and the text
// re-escaped (&amp; &lt; &gt; &nbsp;, and &quot; in attributes).
#include <memory>
#include <string>

#include "server/markup/markup_document.h"

namespace nmt::markup {

// Throws nmt::Error (kInvalidArgument) naming `what` when the elements nest deeper than
// bounds.max_depth.
std::unique_ptr<MarkupDocument> parse_html(const std::string& text, const MarkupBounds& bounds,
                                           const std::string& what);

}  // namespace nmt::markup
