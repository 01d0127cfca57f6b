#include "server/documents/document.h"

#include <algorithm>
#include <cctype>

#include "server/documents/office/office_package.h"
#include "server/documents/text_formats.h"

namespace nmt::server {
namespace {

std::string extension_of(const std::string& filename) {
  const size_t dot = filename.rfind('.');
  const size_t slash = filename.find_last_of("/\\");
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = filename.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

const std::vector<DocumentType>& document_types() {
  static const std::vector<DocumentType> types = {
      {".txt", "text/plain; charset=utf-8"},
      {".srt", "application/x-subrip; charset=utf-8"},
      {".html", "text/html; charset=utf-8"},
      {".htm", "text/html; charset=utf-8"},
      {".md", "text/markdown; charset=utf-8"},
      {".docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
      {".odt", "application/vnd.oasis.opendocument.text"},
      {".pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
  };
  return types;
}

std::string document_extensions() {
  std::string out;
  for (const DocumentType& t : document_types()) out += (out.empty() ? "" : ", ") + std::string(t.extension);
  return out;
}

std::string content_type_of(const std::string& filename) {
  const std::string ext = extension_of(filename);
  for (const DocumentType& t : document_types()) {
    if (ext == t.extension) return t.content_type;
  }
  return "application/octet-stream";
}

std::unique_ptr<Document> read_document(const std::string& filename, const std::string& bytes,
                                        const DocumentLimits& limits) {
  const std::string ext = extension_of(filename);
  const auto& types = document_types();
  if (std::none_of(types.begin(), types.end(), [&](const DocumentType& t) { return ext == t.extension; })) {
    throw DocumentError(400, "Invalid request: file format not supported (" +
                                 (ext.empty() ? std::string("a file name without an extension") : ext) +
                                 "; supported: " + document_extensions() + ")");
  }
  if (bytes.size() > limits.max_file_bytes) {
    throw DocumentError(413, "the file is " + std::to_string(bytes.size()) + " bytes, over documents.max_file_bytes (" +
                                 std::to_string(limits.max_file_bytes) + ")");
  }
  if (ext == ".txt") return read_plain_text(bytes);
  if (ext == ".srt") return read_subtitles(bytes);
  if (ext == ".html" || ext == ".htm" || ext == ".md") return read_markup(bytes, ext != ".md", filename);
  if (ext == ".docx") return read_office(bytes, docx_format(), limits);
  if (ext == ".odt") return read_office(bytes, odt_format(), limits);
  return read_office(bytes, pptx_format(), limits);
}

}  // namespace nmt::server
