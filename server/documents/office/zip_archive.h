#pragma once
// The archives of .docx, .pptx (OOXML) and .odt (ODF), read and written with Debian's libzip
// (libzip-dev), in memory. Reading enforces DocumentLimits before and while it decompresses:
// entries, decompressed bytes in all, the compression ratio of each entry and of the whole
// (zip bombs), an entry that holds more than its header declares.
#include <string>
#include <vector>

#include "server/documents/document_limits.h"

namespace nmt::server {

struct ZipEntry {
  std::string name;
  std::string data;     // decompressed
  bool stored = false;  // written uncompressed (ODF's `mimetype` must be)
  bool directory = false;
};

struct ZipArchive {
  std::vector<ZipEntry> entries;  // in the archive's order (ODF's `mimetype` first)

  ZipEntry* find(const std::string& name);
  const ZipEntry* find(const std::string& name) const;
};

// Throws DocumentError (400) naming the bound broken, or saying why the bytes are no archive.
ZipArchive read_zip(const std::string& bytes, const DocumentLimits& limits);
// The entries in order, deflated unless `stored`. Throws std::runtime_error (libzip's reason).
std::string write_zip(const ZipArchive& archive);

}  // namespace nmt::server
