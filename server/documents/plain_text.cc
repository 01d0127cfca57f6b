// Plain text (.txt): every line with text in it is translated (its sentences split by the
// pipeline as any text's), the others and every line ending kept as they were.
#include <algorithm>
#include <cctype>

#include "server/documents/text_formats.h"

namespace nmt::server {
namespace {

class PlainText : public Document {
 public:
  explicit PlainText(const std::string& bytes) {
    size_t start = 0;
    while (start < bytes.size()) {
      size_t end = bytes.find('\n', start);
      end = end == std::string::npos ? bytes.size() : end + 1;
      std::string line = bytes.substr(start, end - start);
      std::string ending;
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
        ending.insert(ending.begin(), line.back());
        line.pop_back();
      }
      const bool text = std::any_of(line.begin(), line.end(), [](unsigned char c) { return !std::isspace(c); });
      if (text) texts_.push_back(line);
      lines_.push_back({text ? std::string() : line, ending, text});
      start = end;
    }
  }

  std::string write(const std::vector<TranslatedText>& translations) override {
    std::string out;
    size_t next = 0;
    for (const Line& l : lines_) {
      out += l.translated ? translations.at(next++).text : l.kept;
      out += l.ending;
    }
    return out;
  }

 private:
  struct Line {
    std::string kept;    // a line without text, as it was
    std::string ending;  // "\n", "\r\n" or none (the last line)
    bool translated;
  };
  std::vector<Line> lines_;
};

}  // namespace

void check_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size() && !(n == 2 && c < 0xC2) && !(n == 4 && c > 0xF4);
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n == 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && n == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (!ok) throw DocumentError(400, "the file is not UTF-8 text (byte " + std::to_string(i) + ")");
    i += n;
  }
}

std::unique_ptr<Document> read_plain_text(const std::string& bytes) {
  check_utf8(bytes);
  return std::make_unique<PlainText>(bytes);
}

}  // namespace nmt::server
