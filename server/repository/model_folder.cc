#include "server/repository/model_folder.h"

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace nmt::server {
namespace {

namespace fs = std::filesystem;

}  // namespace

const std::vector<std::string>& model_files() {
  static const std::vector<std::string> files = {"config.json", "model.safetensors", "source.spm",
                                                 "target.spm", "vocab.json"};
  return files;
}

std::string model_fingerprint(const std::string& folder, std::string* missing) {
  std::ostringstream print, absent;
  for (const std::string& file : model_files()) {
    std::error_code ec;
    const fs::path path = fs::path(folder) / file;
    // Follows symbolic links: a repository of links to shared weights fingerprints the
    // weights, not the links.
    const auto size = fs::file_size(path, ec);
    const auto mtime = ec ? fs::file_time_type() : fs::last_write_time(path, ec);
    if (ec) {
      absent << (absent.tellp() > 0 ? ", " : "") << file;
      continue;
    }
    print << file << ':' << size << ':' << mtime.time_since_epoch().count() << ';';
  }
  if (missing) *missing = absent.str();
  return absent.tellp() > 0 ? "" : print.str();
}

std::map<std::string, ModelFolder> scan_model_folders(const std::string& repository) {
  std::error_code ec;
  fs::directory_iterator it(repository, ec);
  if (ec) throw std::runtime_error("cannot read model_repository.path " + repository + ": " + ec.message());
  std::map<std::string, ModelFolder> out;
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // hidden: e.g. a copy being written
    if (!fs::exists(entry.path() / "config.json", ec)) continue;
    ModelFolder folder;
    folder.path = entry.path().string();
    folder.fingerprint = model_fingerprint(folder.path, &folder.missing);
    out.emplace(name, std::move(folder));
  }
  return out;
}

}  // namespace nmt::server
