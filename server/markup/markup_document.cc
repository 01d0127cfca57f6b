#include "server/markup/markup_document.h"

#include "model/error.h"
#include "server/markup/html.h"
#include "server/markup/markdown.h"

namespace nmt::markup {

Format parse_format(std::string_view format) {
  if (format.empty() || format == "text") return Format::kText;
  if (format == "html") return Format::kHtml;
  if (format == "markdown") return Format::kMarkdown;
  throw Error(ErrorCode::kInvalidArgument, "options.format: \"" + std::string(format) +
                                               "\" is not a format (text, html or markdown)");
}

std::unique_ptr<MarkupDocument> parse_markup(Format format, const std::string& text,
                                             const MarkupBounds& bounds, const std::string& what) {
  switch (format) {
    case Format::kHtml: return parse_html(text, bounds, what);
    case Format::kMarkdown: return parse_markdown(text, bounds, what);
    case Format::kText: break;
  }
  throw Error(ErrorCode::kInternal, "markup: plain text has no markup to parse");
}

}  // namespace nmt::markup
