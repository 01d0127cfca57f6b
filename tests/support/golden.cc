#include "tests/support/golden.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

namespace nmt::test {
namespace {

GoldenHypothesis hypothesis(const nlohmann::json& j) {
  GoldenHypothesis h;
  h.ids = j.at("ids").get<std::vector<int>>();
  h.text = j.at("text").get<std::string>();
  h.score = j.value("score", 0.f);
  return h;
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

std::string repo_root() { return NMT_REPO_ROOT; }
std::string demo_model_dir() { return repo_root() + "/models/m30k-en-de-small"; }
std::string shared_dir() { return NMT_SHARED_DIR; }
std::string golden_dir() { return shared_dir() + "/golden/m30k-en-de-small"; }
bool have_golden() { return exists(golden_dir() + "/golden_test2016.jsonl"); }
std::string conformance_dir() { return repo_root() + "/tests/conformance"; }
std::string demo_references_path() { return conformance_dir() + "/demo/references.jsonl"; }

namespace {

// Sub-folders of `dir` that hold `file`, sorted by name.
std::vector<std::string> folders_with(const std::string& dir, const char* file) {
  std::vector<std::string> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory() && exists((e.path() / file).string())) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> conformance_variants() { return folders_with(conformance_dir() + "/models", "references.jsonl"); }
std::vector<std::string> conformance_families() { return folders_with(conformance_dir() + "/families", "references.jsonl"); }
std::vector<std::string> conformance_refused() { return folders_with(conformance_dir() + "/refused", "meta.json"); }

std::vector<GoldenSentence> load_golden() { return load_references(golden_dir() + "/golden_test2016.jsonl"); }

std::vector<GoldenSentence> load_references(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<GoldenSentence> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    GoldenSentence g;
    g.id = j.at("id").get<int>();
    g.source = j.at("source").get<std::string>();
    g.source_ids = j.at("source_ids").get<std::vector<int>>();
    g.beam4 = hypothesis(j.at("beam4"));
    g.greedy = hypothesis(j.at("greedy"));
    g.greedy_scored = j.at("greedy").contains("score");
    g.source_language = j.value("source_language", "");
    g.target_language = j.value("target_language", "");
    if (j.contains("nbest4")) {
      for (const auto& h : j.at("nbest4")) g.nbest4.push_back(hypothesis(h));
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> read_gzip_lines(const std::string& path) {
  if (!exists(path)) throw std::runtime_error("missing " + path);
  FILE* pipe = ::popen(("gzip -dc '" + path + "'").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run gzip on " + path);
  std::vector<std::string> lines;
  std::string cur;
  for (int ch; (ch = std::fgetc(pipe)) != EOF;) {
    if (ch == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(char(ch));
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  if (::pclose(pipe) != 0) throw std::runtime_error("gzip failed on " + path);
  return lines;
}

std::vector<std::string> test2016_references() {
  return read_gzip_lines(shared_dir() + "/data/multi30k/test_2016_flickr.de.gz");
}

}  // namespace nmt::test
