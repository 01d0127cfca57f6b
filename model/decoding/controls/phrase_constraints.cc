#include "model/decoding/controls/phrase_constraints.h"

#include <algorithm>

#include "model/error.h"

namespace nmt {

PhraseConstraints::PhraseConstraints(const std::vector<std::vector<int>>& phrases) {
  for (const std::vector<int>& p : phrases) {
    if (p.empty()) throw Error(ErrorCode::kInvalidArgument, "glossary: a required target term has no tokens");
    int node = 0;
    for (int token : p) {
      int next = child(node, token);
      if (next < 0) {
        next = int(nodes_.size());
        Node n;
        n.depth = nodes_[size_t(node)].depth + 1;
        nodes_.push_back(n);
        nodes_[size_t(node)].children.push_back({token, next});
      }
      node = next;
    }
    if (nodes_[size_t(node)].phrase >= 0) continue;  // the same phrase twice: one requirement
    if (phrases_ == kMaxPhrases)
      throw Error(ErrorCode::kInvalidArgument, "glossary: more than " + std::to_string(kMaxPhrases) +
                                                   " distinct target terms required in one sentence");
    nodes_[size_t(node)].phrase = phrases_;
    lengths_.push_back(int(p.size()));
    total_ += int(p.size());
    // every node on the path holds the phrase below it
    int at = 0;
    nodes_[0].below |= uint64_t(1) << phrases_;
    for (int token : p) {
      at = child(at, token);
      nodes_[size_t(at)].below |= uint64_t(1) << phrases_;
    }
    ++phrases_;
  }
}

int PhraseConstraints::child(int node, int token) const {
  for (const auto& [t, n] : nodes_[size_t(node)].children) {
    if (t == token) return n;
  }
  return -1;
}

int PhraseConstraints::done_length(uint64_t done) const {
  int sum = 0;
  for (int p = 0; p < phrases_; ++p) {
    if (done >> p & 1) sum += lengths_[size_t(p)];
  }
  return sum;
}

PhraseConstraints::State PhraseConstraints::next(State s, int token) const {
  int n = s.node != 0 ? child(s.node, token) : -1;
  if (n < 0 || !useful(n, s.done)) n = child(0, token);  // the phrase in progress broke off
  if (n < 0 || !useful(n, s.done)) return {s.done, 0};
  const int p = nodes_[size_t(n)].phrase;
  if (p >= 0 && !(s.done >> p & 1)) s.done |= uint64_t(1) << p;
  // a longer missing phrase through this node keeps the progress; else the next starts afresh
  return {s.done, useful(n, s.done) ? n : 0};
}

void PhraseConstraints::advancing(State s, std::vector<int>* tokens) const {
  for (const auto& [t, n] : nodes_[size_t(s.node)].children) {
    if (useful(n, s.done)) tokens->push_back(t);
  }
  if (s.node == 0) return;
  for (const auto& [t, n] : nodes_[0].children) {
    if (useful(n, s.done) && std::find(tokens->begin(), tokens->end(), t) == tokens->end()) tokens->push_back(t);
  }
}

}  // namespace nmt
