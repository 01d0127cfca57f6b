#include "model/decode_loop.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "model/error.h"

namespace nmt {

struct DecodeLoop::Active {
  Active(uint64_t id, const DecodeOptions& options, const ModelConfig& config)
      : id(id), search(options, config) {}
  uint64_t id;
  SentenceSearch search;
  int slot = -1;
  std::vector<int> rows;  // cache row of each beam
};

DecodeLoop::DecodeLoop(Engine& engine, const ModelConfig& config, DetokenizeFn detokenize,
                       const EngineCapacity& capacity)
    : engine_(engine), config_(config), detokenize_(std::move(detokenize)), capacity_(capacity) {
  if (capacity.sentences < 1 || capacity.rows < 1 || capacity.source_tokens < 1)
    throw Error(ErrorCode::kInvalidArgument, "a decode loop needs at least one slot, row and token");
  engine_.reserve(capacity);
  // Stacks popped from the back: slots and rows are handed out lowest first.
  free_slots_.resize(size_t(capacity.sentences));
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);
  free_rows_.resize(size_t(capacity.rows));
  std::iota(free_rows_.rbegin(), free_rows_.rend(), 0);
}

DecodeLoop::~DecodeLoop() = default;

bool DecodeLoop::fits(size_t source_tokens, const DecodeOptions& options, std::string* why) const {
  std::string reason;
  if (source_tokens > size_t(capacity_.source_tokens))
    reason = "a sentence of " + std::to_string(source_tokens) + " tokens exceeds the " +
             std::to_string(capacity_.source_tokens) + " tokens a decode slot holds";
  else if (options.beam_size > capacity_.rows)
    reason = "beam " + std::to_string(options.beam_size) + " exceeds the " +
             std::to_string(capacity_.rows) + " cache rows of a decode loop";
  if (why) *why = reason;
  return reason.empty();
}

bool DecodeLoop::can_admit(const DecodeOptions& options) const {
  return !free_slots_.empty() && int(free_rows_.size()) >= options.beam_size;
}

void DecodeLoop::admit(std::vector<LoopSentence> sentences) {
  std::vector<std::unique_ptr<Active>> admitted;
  for (LoopSentence& s : sentences) {
    std::string why;
    if (!fits(s.source_ids.size(), s.options, &why) || !can_admit(s.options)) {
      for (auto& a : admitted) release(*a);
      throw Error(ErrorCode::kInternal, "decode loop: admitted a sentence that does not fit: " +
                                            (why.empty() ? "no free slot or rows" : why));
    }
    auto a = std::make_unique<Active>(s.id, s.options, config_);
    a->slot = free_slots_.back();
    free_slots_.pop_back();
    for (int b = 0; b < s.options.beam_size; ++b) {
      a->rows.push_back(free_rows_.back());
      free_rows_.pop_back();
    }
    admitted.push_back(std::move(a));
  }
  for (size_t i = 0; i < admitted.size(); ++i) {
    joining_.push_back(std::move(admitted[i]));
    joining_sources_.push_back(std::move(sentences[i]));
  }
}

StepReport DecodeLoop::step() {
  StepReport report;
  encode_items_.clear();
  for (size_t i = 0; i < joining_.size(); ++i) encode_items_.push_back({&joining_sources_[i].source_ids, joining_[i]->slot});
  report.encoded = int(encode_items_.size());
  bool deferred_encode = false;
  while (true) {
    try {
      if (active_.empty() && !joining_.empty()) {
        // Nothing decodes yet: encode first and take the newcomers' first step at once.
        const auto start = std::chrono::steady_clock::now();
        engine_.encode(encode_items_);
        report.encode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        join();
        encode_items_.clear();
      }
      if (active_.empty()) return report;
      // A step that grows the caches takes no encode along (the newcomers wait one step):
      // if the growth runs out of memory, nothing has run and the step can be repeated.
      int furthest = 0;
      for (const auto& a : active_) furthest = std::max(furthest, a->search.position());
      const int cached = engine_.cache_positions();
      deferred_encode = cached > 0 && furthest >= cached && !encode_items_.empty();
      in_.groups.clear();
      in_.tokens.clear();
      in_.cache_rows.clear();
      in_.parent_rows.clear();
      in_.running_scores.clear();
      report.first_step.clear();
      for (const auto& a : active_) {
        const SentenceSearch& s = a->search;
        in_.groups.push_back({a->slot, s.position(), s.beam(), s.k(), s.mask_eos(), s.force_eos()});
        for (int b = 0; b < s.beam(); ++b) {
          in_.tokens.push_back(s.tokens()[size_t(b)]);
          in_.cache_rows.push_back(a->rows[size_t(b)]);
          in_.parent_rows.push_back(a->rows[size_t(s.parents()[size_t(b)])]);
          in_.running_scores.push_back(s.running_scores()[size_t(b)]);
        }
        if (s.position() == 0) report.first_step.push_back(a->id);
      }
      in_.encode = encode_items_.empty() || deferred_encode ? nullptr : &encode_items_;
      engine_.step(in_, &out_);
      break;
    } catch (const Error& e) {
      // A step without an encode runs out of memory only where the engines grow their
      // caches, before they change any state: it can be taken again without the sentences
      // that needed the growth. With an encode riding on it the engine may have failed
      // after the step itself ran (the CUDA engine allocates the encoder's buffers then),
      // so that step cannot be repeated; growth steps carry no encode (above) when the
      // engine says where its caches end.
      if (shed_on_out_of_memory_ && e.code() == ErrorCode::kResourceExhausted &&
          (encode_items_.empty() || deferred_encode) && shed_furthest(e, &report)) {
        continue;
      }
      drop_all();
      throw;
    } catch (...) {
      drop_all();
      throw;
    }
  }
  const int vocab = engine_.vocab_size();
  size_t offset = 0, kept = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    Active& a = *active_[i];
    const int k = a.search.k();
    const bool done = a.search.advance(out_.scores.data() + offset, out_.candidates.data() + offset, vocab);
    offset += size_t(k);
    if (!done) {
      if (kept != i) active_[kept] = std::move(active_[i]);
      ++kept;
      continue;
    }
    FinishedSentence f;
    f.id = a.id;
    f.steps = a.search.position();
    const DecodeResult r = a.search.result();
    for (size_t h = 0; h < r.ids.size(); ++h) {
      f.translation.hypotheses.push_back({r.ids[h], detokenize_ ? detokenize_(r.ids[h]) : "", r.scores[h]});
    }
    report.finished.push_back(std::move(f));
    release(a);
  }
  active_.resize(kept);
  if (deferred_encode) {
    report.encoded = 0;  // the next step encodes them
    return report;
  }
  join();  // encoded during this step: they decode from the next one
  return report;
}

void DecodeLoop::join() {
  for (auto& a : joining_) {
    // Keep sentences ordered by beam: the engine runs one top-k per run of equal beams.
    const int beam = a->search.beam();
    auto at = std::upper_bound(active_.begin(), active_.end(), beam,
                               [](int b, const std::unique_ptr<Active>& x) { return b < x->search.beam(); });
    active_.insert(at, std::move(a));
  }
  joining_.clear();
  joining_sources_.clear();
}

void DecodeLoop::drop_all() {
  for (auto& a : active_) release(*a);
  for (auto& a : joining_) release(*a);
  active_.clear();
  joining_.clear();
  joining_sources_.clear();
}

bool DecodeLoop::shed_furthest(const Error& e, StepReport* report) {
  if (active_.empty()) return false;
  int furthest = 0;
  for (const auto& a : active_) furthest = std::max(furthest, a->search.position());
  size_t kept = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (active_[i]->search.position() == furthest) {
      report->failed.push_back({active_[i]->id, e.code(), e.what()});
      release(*active_[i]);
      continue;
    }
    if (kept != i) active_[kept] = std::move(active_[i]);
    ++kept;
  }
  active_.resize(kept);
  return true;
}

void DecodeLoop::remove(uint64_t id) {
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if ((*it)->id != id) continue;
    release(**it);
    active_.erase(it);
    return;
  }
  for (size_t i = 0; i < joining_.size(); ++i) {
    if (joining_[i]->id != id) continue;
    release(*joining_[i]);
    joining_.erase(joining_.begin() + long(i));
    joining_sources_.erase(joining_sources_.begin() + long(i));
    return;
  }
}

void DecodeLoop::release(Active& a) {
  if (a.slot >= 0) free_slots_.push_back(a.slot);
  free_rows_.insert(free_rows_.end(), a.rows.begin(), a.rows.end());
  a.slot = -1;
  a.rows.clear();
}

}  // namespace nmt
