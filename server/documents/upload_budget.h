#pragma once
// The memory that POST /translate_file's uploads hold together (config
// documents.max_concurrent_mb, README "Limits"): each upload is held whole while it is
// translated (its bytes, its decompressed parts, its texts), so without a bound across them
// N concurrent uploads cost N times the per-file bounds. An upload is charged what it may
// hold at most (upload_charge) before it is read, and gives it back when its answer is
// written; one that does not fit now is refused (429, Retry-After), one that can never fit
// is refused for good (413). A pure accounting, no clock: tests drive it directly.
#include <cstddef>
#include <mutex>
#include <string>

#include "server/documents/document_limits.h"

namespace nmt::server {

// The most an upload of `file_bytes` named `filename` may hold in memory while it is read
// and translated: its bytes, and for an archive (.docx, .odt, .pptx) its entries once
// inflated, as much as documents.max_compression_ratio and max_decompressed_bytes let them
// grow. The texts and the written file are of the same order as what they came from.
size_t upload_charge(const std::string& filename, size_t file_bytes, const DocumentLimits& limits);

class UploadBudget {
 public:
  explicit UploadBudget(size_t max_bytes) : max_bytes_(max_bytes) {}
  UploadBudget(const UploadBudget&) = delete;
  UploadBudget& operator=(const UploadBudget&) = delete;

  // Takes `bytes` if they fit beside what the uploads in flight hold; false (nothing taken)
  // if not.
  bool take(size_t bytes);
  // Gives back what a take() took.
  void give_back(size_t bytes);
  // More than the whole budget: refused whatever else is in flight.
  bool never_fits(size_t bytes) const { return bytes > max_bytes_; }
  size_t in_use() const;
  size_t max_bytes() const { return max_bytes_; }

 private:
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  size_t in_use_ = 0;
};

}  // namespace nmt::server
