#pragma once
// Markdown (TranslateOptions.format "markdown"), parsed with Debian's cmark (libcmark-dev:
// the CommonMark reference implementation, whose renderer writes a tree back as CommonMark,
// escaping the translated text where it would read as markup; md4c only parses).
//
// Blocks: each paragraph and heading, its emphasis, strong emphasis and links as spans, its
// images, code spans and raw HTML as void spans; then each link's and image's title and each
// image's alt (its description as plain text) as blocks of their own, as HTML's title and
// alt attributes are. Left as they are: code spans, code blocks, raw HTML, URLs. Line breaks stay as void spans; soft
// breaks become spaces. The answer is cmark's CommonMark rendering of the translated tree:
// the same structure, in cmark's spelling (list markers, emphasis with `*`).
#include <memory>
#include <string>

#include "server/markup/markup_document.h"

namespace nmt::markup {

// Throws nmt::Error (kInvalidArgument) naming `what` when blocks and inlines nest deeper
// than bounds.max_depth.
std::unique_ptr<MarkupDocument> parse_markdown(const std::string& text, const MarkupBounds& bounds,
                                               const std::string& what);

}  // namespace nmt::markup
