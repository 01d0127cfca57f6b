#include "tools/loadgen/sentence_source.h"

#include <zlib.h>

#include <sstream>
#include <stdexcept>

namespace nmt::loadgen {

std::vector<std::string> read_sentences(const std::string& path) {
  // gzopen reads plain files transparently as well.
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, n);
  const bool failed = n < 0;
  gzclose(file);
  if (failed) throw std::runtime_error("cannot read " + path + " (corrupt gzip?)");

  std::vector<std::string> sentences;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) sentences.push_back(line);
  }
  if (sentences.empty()) throw std::runtime_error(path + " holds no sentence");
  return sentences;
}

}  // namespace nmt::loadgen
