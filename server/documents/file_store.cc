#include "server/documents/file_store.h"

#include <algorithm>
#include <cctype>
#include <random>

namespace nmt::server {
namespace {

constexpr size_t kIdChars = 32;  // 128 bits in hex

std::string random_id() {
  static thread_local std::random_device device;
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (size_t i = 0; i < kIdChars / 8; ++i) {
    uint32_t word = device();
    for (int k = 0; k < 8; ++k, word >>= 4) id += hex[word & 0xF];
  }
  return id;
}

// The last path component of an uploaded name, with only characters a URL path and a
// Content-Disposition header carry as they are.
std::string safe_filename(const std::string& filename) {
  std::string base = filename.substr(filename.find_last_of("/\\") + 1);
  std::string out;
  for (unsigned char c : base) out += (std::isalnum(c) || c == '.' || c == '-' || c == '_') ? static_cast<char>(c) : '_';
  return out.empty() ? std::string("file") : out;
}

}  // namespace

FileStore::FileStore(double keep_seconds, size_t max_bytes)
    : keep_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(keep_seconds))),
      max_bytes_(max_bytes) {}

bool FileStore::valid_name(const std::string& name) {
  if (name.size() < kIdChars + 2 || name[kIdChars] != '.') return false;
  for (size_t i = 0; i < kIdChars; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return name.find_first_of("/\\") == std::string::npos && name.find("..") == std::string::npos;
}

void FileStore::expire(Clock::time_point now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    const auto found = files_.find(by_expiry_.begin()->second);
    bytes_ -= found->second.file.bytes.size();
    files_.erase(found);
    by_expiry_.erase(by_expiry_.begin());
  }
}

FileStore::Stored FileStore::put(const std::string& filename, std::string bytes, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  expire(now);
  Stored out;
  if (bytes.size() > max_bytes_) {
    out.never_fits = true;
    return out;
  }
  if (bytes_ + bytes.size() > max_bytes_) {  // room comes back as the oldest files expire
    out.retry_after = by_expiry_.empty() ? 1.0
                                         : std::max(1.0, std::chrono::duration<double>(by_expiry_.begin()->first - now).count());
    return out;
  }
  std::string name;
  do {
    name = random_id() + "." + safe_filename(filename);
  } while (files_.count(name));
  bytes_ += bytes.size();
  const Clock::time_point expires = now + keep_;
  files_.emplace(name, Entry{File{filename, std::move(bytes)}, expires});
  by_expiry_.emplace(expires, name);
  out.name = name;
  return out;
}

std::optional<FileStore::File> FileStore::get(const std::string& name, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  expire(now);
  const auto found = files_.find(name);
  if (found == files_.end()) return std::nullopt;
  return found->second.file;
}

size_t FileStore::bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace nmt::server
