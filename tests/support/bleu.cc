#include "tests/support/bleu.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace nmt::test {
namespace {

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s->find(from, pos)) != std::string::npos; pos += to.size()) {
    s->replace(pos, from.size(), to);
  }
}

std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::string tokenize_13a(const std::string& input) {
  std::string line = input;
  replace_all(&line, "<skipped>", "");
  replace_all(&line, "-\n", "");
  replace_all(&line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(&line, "&quot;", "\"");
    replace_all(&line, "&amp;", "&");
    replace_all(&line, "&lt;", "<");
    replace_all(&line, "&gt;", ">");
  }
  line = " " + line + " ";
  // mteval-v13a's rules, applied in order, as sacreBLEU's TokenizerRegexp does.
  static const std::regex punct(R"(([\{-\~\[-\` -\&\(-\+\:-\@\/]))");
  static const std::regex period_after_nondigit(R"(([^0-9])([\.,]))");
  static const std::regex period_before_nondigit(R"(([\.,])([^0-9]))");
  static const std::regex dash_after_digit(R"(([0-9])(-))");
  line = std::regex_replace(line, punct, " $1 ");
  line = std::regex_replace(line, period_after_nondigit, "$1 $2 ");
  line = std::regex_replace(line, period_before_nondigit, " $1 $2");
  line = std::regex_replace(line, dash_after_digit, "$1 $2 ");
  std::string out;
  for (const auto& w : split(line)) out += (out.empty() ? "" : " ") + w;
  return out;
}

double corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  if (hyps.size() != refs.size()) throw std::invalid_argument("BLEU: hypotheses and references differ in count");
  double matches[4] = {0, 0, 0, 0}, totals[4] = {0, 0, 0, 0};
  double hyp_len = 0, ref_len = 0;
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto h = split(tokenize_13a(hyps[i]));
    const auto r = split(tokenize_13a(refs[i]));
    hyp_len += double(h.size());
    ref_len += double(r.size());
    for (size_t n = 1; n <= 4; ++n) {
      std::map<std::vector<std::string>, int> ref_counts;
      for (size_t j = 0; j + n <= r.size(); ++j) ref_counts[{r.begin() + long(j), r.begin() + long(j + n)}]++;
      std::map<std::vector<std::string>, int> hyp_counts;
      for (size_t j = 0; j + n <= h.size(); ++j) hyp_counts[{h.begin() + long(j), h.begin() + long(j + n)}]++;
      for (const auto& [gram, count] : hyp_counts) {
        auto it = ref_counts.find(gram);
        matches[n - 1] += std::min(count, it == ref_counts.end() ? 0 : it->second);  // clipped
      }
      totals[n - 1] += double(h.size() >= n ? h.size() - n + 1 : 0);
    }
  }
  if (hyp_len == 0) return 0.0;
  double log_precision = 0;
  for (int n = 0; n < 4; ++n) {
    if (matches[n] == 0 || totals[n] == 0) return 0.0;
    log_precision += std::log(matches[n] / totals[n]) / 4.0;
  }
  const double brevity = hyp_len < ref_len ? std::exp(1.0 - ref_len / hyp_len) : 1.0;
  return 100.0 * brevity * std::exp(log_precision);
}

}  // namespace nmt::test
