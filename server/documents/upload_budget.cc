#include "server/documents/upload_budget.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>

namespace nmt::server {

size_t upload_charge(const std::string& filename, size_t file_bytes, const DocumentLimits& limits) {
  std::string extension;
  if (const size_t dot = filename.rfind('.'); dot != std::string::npos) extension = filename.substr(dot);
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (extension != ".docx" && extension != ".odt" && extension != ".pptx") return file_bytes;
  // The archive's inflated entries are bounded by the ratio over the whole file (past its
  // 64 KiB floor) and by max_decompressed_bytes (office/zip_archive.cc refuses past either).
  const double by_ratio = std::max(static_cast<double>(file_bytes) * limits.max_compression_ratio, 65536.0);
  const size_t inflated = by_ratio >= static_cast<double>(limits.max_decompressed_bytes)
                              ? limits.max_decompressed_bytes
                              : static_cast<size_t>(by_ratio);
  return file_bytes + inflated;
}

bool UploadBudget::take(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > max_bytes_ - in_use_) return false;
  in_use_ += bytes;
  return true;
}

void UploadBudget::give_back(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > in_use_) throw std::logic_error("UploadBudget: giving back more than was taken");
  in_use_ -= bytes;
}

size_t UploadBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

}  // namespace nmt::server
