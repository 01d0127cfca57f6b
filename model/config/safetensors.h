#pragma once
// Reader of the safetensors format: an 8-byte little-endian header length, a JSON header
// mapping tensor names to {dtype, shape, data_offsets}, then the raw data. The file is
// memory-mapped; tensors are converted to float32 when read.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nmt {

struct SafetensorsEntry {
  std::string dtype;  // F32, F16 or BF16
  std::vector<int64_t> shape;
  size_t begin = 0;  // byte offsets into the data section
  size_t end = 0;
};

// Parses and checks the header of a safetensors buffer of `size` bytes: every entry's dtype is
// supported, offsets lie inside the data and match the shape. Throws nmt::Error naming
// `source` (the file) and the tensor at fault. Separate from the mmap so it can be fuzzed.
std::map<std::string, SafetensorsEntry> parse_safetensors_header(const uint8_t* data, size_t size,
                                                                 const std::string& source,
                                                                 size_t* data_offset);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws nmt::Error
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  // The tensor converted to float32; throws nmt::Error(kNotFound) naming it when absent.
  std::vector<float> read_float(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  size_t data_offset_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

}  // namespace nmt
