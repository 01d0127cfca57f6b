#pragma once
// The translated files waiting for their download (GET /download_file/NAME): each kept
// documents.store_seconds from when it was written, all of them within documents.store_bytes.
// A file that does not fit once the expired ones are gone is refused (the caller answers
// 429 with the seconds until the oldest expires), rather than one not yet downloaded
// dropped. Names are 128 random bits in hex, then "." and the uploaded file's name: the
// name is the capability to download it, as LibreTranslate's are. Thread-safe; time is
// passed in, so the policy is tested without waiting.
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace nmt::server {

class FileStore {
 public:
  using Clock = std::chrono::steady_clock;

  FileStore(double keep_seconds, size_t max_bytes);

  struct Stored {
    std::string name;         // "<32 hex>.<filename>"
    double retry_after = 0;   // when refused: seconds until the oldest file expires
    bool never_fits = false;  // refused: larger than documents.store_bytes itself
  };
  // Keeps `bytes` as a file named after `filename` (its last path component). An empty name
  // when refused for room.
  Stored put(const std::string& filename, std::string bytes, Clock::time_point now);

  struct File {
    std::string filename;  // as uploaded
    std::string bytes;
  };
  // The file of `name` while it has not expired.
  std::optional<File> get(const std::string& name, Clock::time_point now);

  size_t bytes_held() const;

  // Whether `name` is one the store could have made (hex id, a dot, a name without '/'):
  // anything else is refused as "Invalid filename" before a look-up.
  static bool valid_name(const std::string& name);

 private:
  struct Entry {
    File file;
    Clock::time_point expires;
  };
  void expire(Clock::time_point now);  // under mutex_

  const Clock::duration keep_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> files_;
  std::multimap<Clock::time_point, std::string> by_expiry_;
  size_t bytes_ = 0;
};

}  // namespace nmt::server
