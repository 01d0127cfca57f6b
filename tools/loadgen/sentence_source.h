#pragma once
// Sentences for the load generator: one per line of a text file, gzip-compressed or not
// (detected by the magic bytes). Empty lines are skipped.
#include <string>
#include <vector>

namespace nmt::loadgen {

// Throws std::runtime_error naming the file when it cannot be read or holds no sentence.
std::vector<std::string> read_sentences(const std::string& path);

}  // namespace nmt::loadgen
