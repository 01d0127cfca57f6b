// SubRip subtitles (.srt): blocks of a cue number, a timing line ("00:00:01,000 --> ..."),
// and text lines, separated by blank lines. A cue's lines are translated as one text (a
// sentence often runs over two lines) and written back as one line; numbers, timings and
// line endings are kept. A block without a timing line is refused naming its line.
#include <cctype>
#include <cstring>

#include "server/documents/text_formats.h"

namespace nmt::server {
namespace {

// "H:MM:SS,mmm" at `pos` (hours of any digits, "." for "," as some tools write): moves past it.
bool timestamp(const std::string& s, size_t& pos) {
  auto digits = [&](size_t min, size_t max) {
    size_t n = 0;
    while (pos < s.size() && n < max && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos, ++n;
    return n >= min;
  };
  auto sign = [&](const char* any) {
    if (pos >= s.size() || !std::strchr(any, s[pos])) return false;
    ++pos;
    return true;
  };
  return digits(1, 9) && sign(":") && digits(2, 2) && sign(":") && digits(2, 2) && sign(",.") && digits(1, 3);
}

// A cue's timing line: "00:00:01,000 --> 00:00:02,000", maybe followed by position settings.
bool timing_line(const std::string& s) {
  size_t pos = s.find_first_not_of(" \t");
  if (pos == std::string::npos || !timestamp(s, pos)) return false;
  pos = s.find_first_not_of(" \t", pos);
  if (pos == std::string::npos || s.compare(pos, 3, "-->") != 0) return false;
  pos = s.find_first_not_of(" \t", pos + 3);
  return pos != std::string::npos && timestamp(s, pos);
}

class Subtitles : public Document {
 public:
  explicit Subtitles(const std::string& bytes) {
    size_t pos = 0;
    if (bytes.compare(0, 3, "\xEF\xBB\xBF") == 0) {
      bom_ = true;
      pos = 3;
    }
    eol_ = bytes.find("\r\n") != std::string::npos ? "\r\n" : "\n";
    std::vector<std::string> lines;
    while (pos < bytes.size()) {
      size_t end = bytes.find('\n', pos);
      if (end == std::string::npos) end = bytes.size();
      std::string line = bytes.substr(pos, end - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(line);
      pos = end + 1;
    }
    size_t i = 0;
    while (i < lines.size()) {
      if (lines[i].find_first_not_of(" \t") == std::string::npos) {
        ++i;
        continue;
      }
      Cue cue;
      cue.number = lines[i];
      if (i + 1 >= lines.size() || !timing_line(lines[i + 1])) {
        throw DocumentError(400, "the file is not SubRip subtitles: line " + std::to_string(i + 2) +
                                     " should be a cue's timing (00:00:01,000 --> 00:00:02,000)");
      }
      cue.timing = lines[i + 1];
      i += 2;
      std::string text;
      while (i < lines.size() && lines[i].find_first_not_of(" \t") != std::string::npos) {
        text += (text.empty() ? "" : " ") + lines[i];
        ++i;
      }
      cue.translated = !text.empty();
      if (cue.translated) texts_.push_back(text);
      cues_.push_back(std::move(cue));
    }
  }

  std::string write(const std::vector<TranslatedText>& translations) override {
    std::string out = bom_ ? "\xEF\xBB\xBF" : "";
    size_t next = 0;
    for (size_t i = 0; i < cues_.size(); ++i) {
      const Cue& c = cues_[i];
      if (i > 0) out += eol_;
      out += c.number + eol_ + c.timing + eol_;
      if (c.translated) out += translations.at(next++).text + eol_;
    }
    return out;
  }

 private:
  struct Cue {
    std::string number, timing;
    bool translated = false;
  };
  std::vector<Cue> cues_;
  bool bom_ = false;
  std::string eol_;
};

}  // namespace

std::unique_ptr<Document> read_subtitles(const std::string& bytes) {
  check_utf8(bytes);
  return std::make_unique<Subtitles>(bytes);
}

}  // namespace nmt::server
