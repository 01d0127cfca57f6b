#pragma once
// An uploaded document as the texts to translate and the file to write from their
// translations: POST /translate_file (server/http/file_api.h) reads one, translates its
// texts as one request, and keeps the written file for download (file_store.h).
// Formats: .txt (lines), .srt (cues, timing kept), .html/.htm and .md (server/markup's
// blocks, their inline markup kept), .docx, .odt, .pptx (paragraphs, their formatting runs
// kept: office/inline_runs.h).
#include <memory>
#include <string>
#include <vector>

#include "server/documents/document_limits.h"

namespace nmt::server {

// Byte ranges of a source and a target text that translate each other (word alignments).
struct AlignedRange {
  size_t source_begin, source_end, target_begin, target_end;
};

// The translation of one text: the target and its word alignments (may be empty).
struct TranslatedText {
  std::string text;
  std::vector<AlignedRange> alignments;
};

class Document {
 public:
  virtual ~Document() = default;
  // The texts to translate, in document order (paragraphs, cues, lines; none blank).
  const std::vector<std::string>& texts() const { return texts_; }
  // The translated file from one translation per text, in order. Call once. Throws
  // std::runtime_error where the format's library fails to write, std::logic_error on a
  // second call or a wrong number of translations.
  virtual std::string write(const std::vector<TranslatedText>& translations) = 0;

 protected:
  std::vector<std::string> texts_;
};

struct DocumentType {
  const char* extension;  // with its dot, lowercase
  const char* content_type;
};

// Every format served, by extension.
const std::vector<DocumentType>& document_types();
// ".docx, .odt, ..." for messages.
std::string document_extensions();
// The content type of a served file name's extension ("application/octet-stream" if none).
std::string content_type_of(const std::string& filename);

// Reads `bytes` as the format of `filename`'s extension (case-insensitive). Throws
// DocumentError: 400 naming an unsupported extension, 413 over documents.max_file_bytes,
// 400 naming any other bound broken or what is malformed. Nothing is kept of a refused file.
std::unique_ptr<Document> read_document(const std::string& filename, const std::string& bytes,
                                        const DocumentLimits& limits);

}  // namespace nmt::server
