#pragma once
// A text with markup (TranslateOptions.format "html" or "markdown"), cut into the blocks that
// are translated: a block's plain text with its inline markup lifted out as spans
// (span_transfer.h), or an attribute's value (HTML alt, title, placeholder). The document
// keeps everything else (structure, code, what is not to be translated) and writes itself
// back with each block replaced by its translation, the spans placed through the alignments.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/markup/span_transfer.h"

namespace nmt::markup {

// What a block is translated as: plain text, no whitespace at its ends, and its spans.
struct Block {
  std::string text;
  std::vector<Span> spans;
};

// A block's translation and its word alignments (block text -> translation, byte ranges).
struct TranslatedBlock {
  std::string text;
  std::vector<AlignmentLink> links;
};

// Bounds of one text's markup (config limits.max_markup_depth).
struct MarkupBounds {
  int max_depth = 100;  // nesting of elements (HTML) or of blocks and inlines (Markdown)
};

class MarkupDocument {
 public:
  virtual ~MarkupDocument() = default;
  // The blocks to translate, in document order; none when the text has nothing to
  // translate (only markup, whitespace, code).
  const std::vector<Block>& blocks() const { return blocks_; }
  // The document with blocks()[i] replaced by translated[i] (as many as blocks()). Throws
  // nmt::Error (kInvalidArgument) when a translation's alignments do not fit its text.
  virtual std::string render(const std::vector<TranslatedBlock>& translated) const = 0;

 protected:
  std::vector<Block> blocks_;
};

// The formats TranslateOptions.format names: "text" (or "") = no markup, "html", "markdown".
enum class Format { kText, kHtml, kMarkdown };
// Throws nmt::Error (kInvalidArgument) naming options.format and the formats for another.
Format parse_format(std::string_view format);

// `text` parsed as `format` (kHtml or kMarkdown); `what` names it in errors ("texts[2]").
// Throws nmt::Error (kInvalidArgument) with the reason when it breaks a bound.
std::unique_ptr<MarkupDocument> parse_markup(Format format, const std::string& text,
                                             const MarkupBounds& bounds, const std::string& what);

}  // namespace nmt::markup
