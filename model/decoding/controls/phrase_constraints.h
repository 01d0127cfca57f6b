#pragma once
// Glossary constraints of one sentence (docs/decoding.md, "Glossary"): the required target
// phrases (token ids) as a trie, and the state of a hypothesis against them: which phrases it
// holds whole and how far it is into the next one. The constrained beam search
// (SentenceSearch::advance_constrained) asks it which tokens advance a hypothesis and how
// many tokens it still needs at least, so that no hypothesis ends (EOS) or runs out of
// max_decoding_length before every phrase is in.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace nmt {

class PhraseConstraints {
 public:
  // At most 64 phrases (a hypothesis' progress is a 64-bit mask); duplicates count once.
  static constexpr int kMaxPhrases = 64;
  PhraseConstraints() = default;
  explicit PhraseConstraints(const std::vector<std::vector<int>>& phrases);

  struct State {
    uint64_t done = 0;  // phrases held whole
    int node = 0;       // trie node of the phrase in progress (0: none)
  };
  bool empty() const { return phrases_ == 0; }
  // The state after `token`: the phrase in progress goes on where the token continues it
  // towards a phrase not yet held, else a phrase may start with it; a phrase completed is
  // marked done.
  State next(State s, int token) const;
  // Tokens a hypothesis must still produce, at least along the trie: the missing phrases'
  // lengths less the progress into the one in progress. 0: every phrase is in.
  int need(State s) const { return total_ - done_length(s.done) - nodes_[size_t(s.node)].depth; }
  // The tokens that advance `s` (continue the phrase in progress, or start a missing one).
  void advancing(State s, std::vector<int>* tokens) const;
  // Constraint tokens held (the bank of DBA-style beam allocation): total less need.
  int progress(State s) const { return total_ - need(s); }
  int total() const { return total_; }

 private:
  struct Node {
    std::vector<std::pair<int, int>> children;  // (token, node)
    int depth = 0;
    int phrase = -1;        // the phrase ending here
    uint64_t below = 0;     // phrases ending here or below
  };
  int child(int node, int token) const;
  int done_length(uint64_t done) const;
  bool useful(int node, uint64_t done) const { return (nodes_[size_t(node)].below & ~done) != 0; }
  std::vector<Node> nodes_{Node{}};
  std::vector<int> lengths_;
  int phrases_ = 0;
  int total_ = 0;
};

}  // namespace nmt
