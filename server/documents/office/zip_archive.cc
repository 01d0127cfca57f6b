#include "server/documents/office/zip_archive.h"

#include <zip.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace nmt::server {
namespace {

// Below this an entry's ratio says nothing (a few KiB of repeated markup compress 100:1 and
// cost nothing); the total bound covers many of them.
constexpr unsigned long long kRatioFloorBytes = 64 << 10;

[[noreturn]] void refuse(const std::string& message) { throw DocumentError(400, message); }

std::string ratio_text(double r) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", r);
  return text;
}

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

}  // namespace

ZipEntry* ZipArchive::find(const std::string& name) {
  for (ZipEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  return const_cast<ZipArchive*>(this)->find(name);
}

ZipArchive read_zip(const std::string& bytes, const DocumentLimits& limits) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (!source) throw std::runtime_error(zip_error_strerror(&error));
  // ZIP_CHECKCONS: the central directory must agree with the local headers.
  std::unique_ptr<zip_t, ZipCloser> zip(zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (!zip) {
    zip_source_free(source);
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    refuse("the file is not a readable zip archive (" + why + ")");
  }
  const zip_int64_t count = zip_get_num_entries(zip.get(), 0);
  if (count > limits.max_archive_entries) {
    refuse("the archive has " + std::to_string(count) + " entries, over documents.max_archive_entries (" +
           std::to_string(limits.max_archive_entries) + ")");
  }
  // The declared sizes first: a bomb is refused before a byte of it is inflated.
  std::vector<zip_stat_t> stats(static_cast<size_t>(count));
  unsigned long long declared = 0;
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t& st = stats[static_cast<size_t>(i)];
    if (zip_stat_index(zip.get(), static_cast<zip_uint64_t>(i), 0, &st) != 0 ||
        !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_SIZE) || !(st.valid & ZIP_STAT_NAME)) {
      refuse("archive entry " + std::to_string(i) + " cannot be read (" + zip_strerror(zip.get()) + ")");
    }
    declared += st.size;
    if (declared > limits.max_decompressed_bytes) {
      refuse("the archive decompresses to more than documents.max_decompressed_bytes (" +
             std::to_string(limits.max_decompressed_bytes) + " bytes)");
    }
    if (static_cast<double>(st.size) > limits.max_compression_ratio * static_cast<double>(std::max<zip_uint64_t>(st.comp_size, 1)) &&
        st.size > kRatioFloorBytes) {
      refuse(std::string("archive entry ") + st.name + " is compressed " +
             ratio_text(static_cast<double>(st.size) / static_cast<double>(std::max<zip_uint64_t>(st.comp_size, 1))) +
             ":1, over documents.max_compression_ratio (" + ratio_text(limits.max_compression_ratio) + ")");
    }
  }
  if (static_cast<double>(declared) > limits.max_compression_ratio * static_cast<double>(bytes.size()) &&
      declared > kRatioFloorBytes) {
    refuse("the archive is compressed " + ratio_text(static_cast<double>(declared) / static_cast<double>(bytes.size())) +
           ":1 in all, over documents.max_compression_ratio (" + ratio_text(limits.max_compression_ratio) + ")");
  }
  ZipArchive archive;
  for (zip_int64_t i = 0; i < count; ++i) {
    const zip_stat_t& st = stats[static_cast<size_t>(i)];
    ZipEntry entry;
    entry.name = st.name;
    entry.stored = (st.valid & ZIP_STAT_COMP_METHOD) && st.comp_method == ZIP_CM_STORE;
    entry.directory = !entry.name.empty() && entry.name.back() == '/';
    if (!entry.directory) {
      std::unique_ptr<zip_file_t, FileCloser> file(zip_fopen_index(zip.get(), static_cast<zip_uint64_t>(i), 0));
      if (!file) refuse("archive entry " + entry.name + " cannot be opened (" + zip_strerror(zip.get()) + ")");
      // One byte more than declared: an entry that holds more than its header says is refused
      // (libzip also checks the CRC at its end).
      entry.data.resize(st.size + 1);
      zip_int64_t got = 0;
      while (static_cast<zip_uint64_t>(got) < st.size + 1) {
        const zip_int64_t n = zip_fread(file.get(), entry.data.data() + got, st.size + 1 - static_cast<zip_uint64_t>(got));
        if (n < 0) refuse("archive entry " + entry.name + " is corrupt (" + zip_file_strerror(file.get()) + ")");
        if (n == 0) break;
        got += n;
      }
      if (static_cast<zip_uint64_t>(got) != st.size) {
        refuse("archive entry " + entry.name + " holds " + (static_cast<zip_uint64_t>(got) > st.size ? "more" : "less") +
               " than its declared " + std::to_string(st.size) + " bytes");
      }
      entry.data.resize(st.size);
    }
    archive.entries.push_back(std::move(entry));
  }
  return archive;
}

std::string write_zip(const ZipArchive& archive) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* out = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (!out) throw std::runtime_error(zip_error_strerror(&error));
  zip_source_keep(out);  // it outlives the archive that writes into it
  zip_t* zip = zip_open_from_source(out, ZIP_TRUNCATE, &error);
  if (!zip) {
    zip_source_free(out);
    throw std::runtime_error(std::string("cannot write the archive: ") + zip_error_strerror(&error));
  }
  auto fail = [&](const std::string& what) {
    const std::string why = zip_strerror(zip);
    zip_discard(zip);
    zip_source_free(out);
    throw std::runtime_error("cannot write the archive (" + what + "): " + why);
  };
  for (const ZipEntry& e : archive.entries) {
    if (e.directory) {
      if (zip_dir_add(zip, e.name.c_str(), ZIP_FL_ENC_UTF_8) < 0) fail(e.name);
      continue;
    }
    // The data stays in `archive` until zip_close writes it.
    zip_source_t* data = zip_source_buffer(zip, e.data.data(), e.data.size(), 0);
    if (!data) fail(e.name);
    const zip_int64_t index = zip_file_add(zip, e.name.c_str(), data, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE);
    if (index < 0) {
      zip_source_free(data);
      fail(e.name);
    }
    if (zip_set_file_compression(zip, static_cast<zip_uint64_t>(index), e.stored ? ZIP_CM_STORE : ZIP_CM_DEFLATE, 0) != 0) {
      fail(e.name);
    }
  }
  if (zip_close(zip) != 0) fail("close");
  std::string bytes;
  zip_stat_t st;
  if (zip_source_stat(out, &st) != 0 || zip_source_open(out) != 0) {
    zip_source_free(out);
    throw std::runtime_error("cannot read the written archive");
  }
  bytes.resize(st.size);
  const zip_int64_t n = zip_source_read(out, bytes.data(), st.size);
  zip_source_close(out);
  zip_source_free(out);
  if (n < 0 || static_cast<zip_uint64_t>(n) != st.size) throw std::runtime_error("cannot read the written archive");
  return bytes;
}

}  // namespace nmt::server
