#include "model/config/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "model/error.h"

namespace nmt {
namespace {

// Headers larger than this are refused before parsing: real ones are a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, source + ": corrupt safetensors file: " + what);
}

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

std::map<std::string, SafetensorsEntry> parse_safetensors_header(const uint8_t* data, size_t size,
                                                                 const std::string& source,
                                                                 size_t* data_offset) {
  if (size < 8) corrupt(source, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    corrupt(source, "header length " + std::to_string(header_len) + " exceeds the file size " +
                        std::to_string(size) + " (truncated file?)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    corrupt(source, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) corrupt(source, "header is not a JSON object");
  const size_t data_begin = 8 + header_len;
  const size_t data_size = size - data_begin;
  std::map<std::string, SafetensorsEntry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const auto& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      corrupt(source, "tensor '" + name + "' lacks a valid dtype, shape or data_offsets");
    }
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    const size_t elem = dtype_size(e.dtype);
    if (elem == 0) {
      throw Error(ErrorCode::kInvalidArgument, source + ": tensor '" + name + "' has unsupported dtype " +
                                                   e.dtype + " (supported: F32, F16, BF16)");
    }
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40)) {
        corrupt(source, "tensor '" + name + "' has an invalid shape");
      }
      e.shape.push_back(int64_t(d.get<uint64_t>()));
      numel *= d.get<uint64_t>();
      if (numel > (uint64_t(1) << 40)) corrupt(source, "tensor '" + name + "' is implausibly large");
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      corrupt(source, "tensor '" + name + "' has invalid data_offsets");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size) {
      corrupt(source, "tensor '" + name + "' data [" + std::to_string(e.begin) + ", " +
                          std::to_string(e.end) + ") lies outside the " + std::to_string(data_size) +
                          "-byte data section (truncated file?)");
    }
    if (e.end - e.begin != numel * elem) {
      corrupt(source, "tensor '" + name + "' has " + std::to_string(e.end - e.begin) +
                          " bytes but its shape needs " + std::to_string(numel * elem));
    }
    entries.emplace(name, std::move(e));
  }
  *data_offset = data_begin;
  return entries;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(ErrorCode::kNotFound, path + ": cannot open weights file (missing file?)");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument, path + ": cannot stat weights file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      throw Error(ErrorCode::kInvalidArgument, path + ": cannot map weights file");
    }
    map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  try {
    static const uint8_t kEmpty[1] = {0};
    entries_ = parse_safetensors_header(map_ ? map_ : kEmpty, size_, path, &data_offset_);
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

std::vector<float> SafetensorsFile::read_float(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw Error(ErrorCode::kNotFound, path_ + ": missing tensor '" + name + "'");
  }
  const SafetensorsEntry& e = it->second;
  const uint8_t* src = map_ + data_offset_ + e.begin;
  const size_t bytes = e.end - e.begin;
  std::vector<float> out;
  if (e.dtype == "F32") {
    out.resize(bytes / 4);
    std::memcpy(out.data(), src, bytes);
  } else {
    out.resize(bytes / 2);
    const bool half = e.dtype == "F16";
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = half ? half_to_float(v) : bf16_to_float(v);
    }
  }
  return out;
}

}  // namespace nmt
