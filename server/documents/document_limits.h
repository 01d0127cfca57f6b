#pragma once
// What one uploaded document may hold (config `documents.*`, README "Limits"): the bounds that
// make a hostile file (a zip bomb, a billion-laughs DTD, XML nested without end) cost a
// refusal, not the server's memory. A file that breaks one is refused whole with the bound's
// name; nothing of it is translated.
#include <cstddef>
#include <stdexcept>
#include <string>

namespace nmt::server {

struct DocumentLimits {
  // The uploaded file's bytes (the HTTP body, server.max_message_bytes, bounds it too).
  size_t max_file_bytes = 4u << 20;
  // Entries of a .docx/.odt/.pptx archive (a real document has tens).
  int max_archive_entries = 1000;
  // Bytes of all the archive's entries once decompressed, together.
  size_t max_decompressed_bytes = 64u << 20;
  // Decompressed bytes of an entry over its compressed bytes, and of the whole archive over
  // the file's (a zip bomb's is in the thousands; XML compresses some 5-20x).
  double max_compression_ratio = 100;
  // Element nesting of an XML part (libxml2's own cap without XML_PARSE_HUGE is 256).
  int max_xml_depth = 128;
  // Translated files kept for download: how long each, and their bytes together.
  double store_seconds = 1800;
  size_t store_bytes = 256u << 20;
  // What the uploads being read and translated hold together (upload_budget.h).
  size_t max_concurrent_bytes = 256u << 20;
};

// A refusal of a document: the HTTP status (400, 413) and what was wrong, naming the bound.
class DocumentError : public std::runtime_error {
 public:
  DocumentError(int status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

}  // namespace nmt::server
