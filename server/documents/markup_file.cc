// HTML (.html, .htm) and Markdown (.md) files: server/markup's documents (gumbo, cmark) cut
// into blocks with their inline markup as spans; each block's translation is written back
// with its spans placed through the alignments (markup::MarkupDocument::render), under
// server/markup's own bounds (markup::MarkupBounds).
#include "server/documents/text_formats.h"
#include "server/markup/markup_document.h"

namespace nmt::server {
namespace {

class MarkupFile : public Document {
 public:
  explicit MarkupFile(std::unique_ptr<markup::MarkupDocument> document) : document_(std::move(document)) {
    for (const markup::Block& b : document_->blocks()) texts_.push_back(b.text);
  }

  std::string write(const std::vector<TranslatedText>& translations) override {
    std::vector<markup::TranslatedBlock> blocks;
    for (const TranslatedText& t : translations) {
      markup::TranslatedBlock b{t.text, {}};
      for (const AlignedRange& a : t.alignments) {
        b.links.push_back({{a.source_begin, a.source_end}, {a.target_begin, a.target_end}});
      }
      blocks.push_back(std::move(b));
    }
    return document_->render(blocks);
  }

 private:
  std::unique_ptr<markup::MarkupDocument> document_;
};

}  // namespace

std::unique_ptr<Document> read_markup(const std::string& bytes, bool html, const std::string& filename) {
  check_utf8(bytes);
  try {
    return std::make_unique<MarkupFile>(markup::parse_markup(html ? markup::Format::kHtml : markup::Format::kMarkdown,
                                                             bytes, markup::MarkupBounds{}, filename));
  } catch (const std::runtime_error& e) {  // nmt::Error: the bound broken
    throw DocumentError(400, e.what());
  }
}

}  // namespace nmt::server
