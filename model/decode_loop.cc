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
  int slot = -1;          // -1: released
  std::vector<int> rows;  // cache row of each beam
  bool removed = false;   // removed while its step was in flight: dropped when collected
};

DecodeLoop::DecodeLoop(Engine& engine, const ModelConfig& config, const EngineCapacity& capacity)
    : engine_(engine), config_(config), capacity_(capacity) {
  if (capacity.sentences < 1 || capacity.rows < 1 || capacity.source_tokens < 1)
    throw Error(ErrorCode::kInvalidArgument, "a decode loop needs at least one slot, row and token");
  engine_.reserve(capacity);
  // Stacks popped from the back: slots and rows are handed out lowest first.
  free_slots_.resize(size_t(capacity.sentences));
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);
  free_rows_.resize(size_t(capacity.rows));
  std::iota(free_rows_.rbegin(), free_rows_.rend(), 0);
}

// A step still in flight is collected, its results dropped: the engine's lane is then free
// for the next loop over it.
DecodeLoop::~DecodeLoop() {
  for (int l = 0; l < Engine::kStepLanes; ++l) {
    if (!lanes_[l].in_flight) continue;
    try {
      engine_.collect(l, &out_);
    } catch (...) {  // a device error: the engine's next call reports it
    }
  }
}

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
  ActiveList admitted;
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
    ++sentences_;
    admitted.push_back(std::move(a));
  }
  for (size_t i = 0; i < admitted.size(); ++i) {
    joining_.push_back(std::move(admitted[i]));
    joining_sources_.push_back(std::move(sentences[i]));
  }
}

StepReport DecodeLoop::step() {
  StepReport report;
  if (!engine_.overlaps_steps()) {  // submit() computed the step: collect it at once
    submit(0, &report);
    if (lanes_[0].in_flight) collect(0, &report);
    return report;
  }
  const int lane = pick_lane();
  if (lanes_[lane].in_flight) collect(lane, &report);
  submit(lane, &report);
  return report;
}

int DecodeLoop::lane_rows(const Lane& lane) const {
  int rows = 0;
  for (const ActiveList* list : {&lane.active, &lane.encoding})
    for (const auto& a : *list) rows += int(a->rows.size());  // a removed one holds none
  return rows;
}

bool DecodeLoop::splits() const {
  return engine_.overlaps_steps() && split_rows_ > 0 && active_rows() >= split_rows_;
}

// The lanes alternate while both have work. An idle lane starts once newcomers bring the
// loop to split_rows_; below it the loop keeps to one lane.
int DecodeLoop::pick_lane() const {
  const int other = 1 - last_lane_;
  if (!lanes_[other].idle()) return other;
  if (lanes_[last_lane_].idle()) return last_lane_;
  if (!joining_.empty() && splits()) return other;
  return last_lane_;
}

DecodeLoop::ActiveList DecodeLoop::take_newcomers(int lane, std::vector<LoopSentence>* sources) {
  const Lane& other = lanes_[1 - lane];
  const bool one_lane = !engine_.overlaps_steps() || split_rows_ <= 0 || (other.idle() && !splits());
  int mine = lane_rows(lanes_[lane]);
  const int theirs = lane_rows(other);
  size_t n = 0;
  for (; n < joining_.size(); ++n) {
    if (!one_lane && mine > theirs) break;  // the rest wait for the other lane's step
    mine += joining_[n]->search.beam();
  }
  ActiveList taken(std::make_move_iterator(joining_.begin()), std::make_move_iterator(joining_.begin() + long(n)));
  sources->assign(std::make_move_iterator(joining_sources_.begin()),
                  std::make_move_iterator(joining_sources_.begin() + long(n)));
  joining_.erase(joining_.begin(), joining_.begin() + long(n));
  joining_sources_.erase(joining_sources_.begin(), joining_sources_.begin() + long(n));
  return taken;
}

// Nothing decodes yet: encode every newcomer first and take their first steps at once,
// spread over both lanes (fewer rows first) when the loop reaches split_rows_.
void DecodeLoop::encode_idle(StepReport* report) {
  encode_items_.clear();
  for (size_t i = 0; i < joining_.size(); ++i) encode_items_.push_back({&joining_sources_[i].source_ids, joining_[i]->slot});
  const auto start = std::chrono::steady_clock::now();
  try {
    engine_.encode(encode_items_);
  } catch (...) {
    drop_all();
    throw;
  }
  report->encode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report->encoded += int(joining_.size());
  const bool two = splits();
  const int first = last_lane_;
  ActiveList parts[Engine::kStepLanes];
  int rows[Engine::kStepLanes] = {0, 0};
  for (auto& a : joining_) {
    const int l = two && rows[1 - first] < rows[first] ? 1 - first : first;
    rows[l] += int(a->rows.size());
    parts[l].push_back(std::move(a));
  }
  for (int l = 0; l < Engine::kStepLanes; ++l) join(parts[l], lanes_[l].active);
  joining_.clear();
  joining_sources_.clear();
}

void DecodeLoop::submit(int l, StepReport* report) {
  Lane& lane = lanes_[l];
  last_lane_ = l;
  bool all_idle = true;
  for (const Lane& x : lanes_) all_idle = all_idle && x.idle();
  if (all_idle && !joining_.empty()) encode_idle(report);
  std::vector<LoopSentence> sources;
  ActiveList taken = take_newcomers(l, &sources);
  encode_items_.clear();
  for (size_t i = 0; i < taken.size(); ++i) encode_items_.push_back({&sources[i].source_ids, taken[i]->slot});
  auto give_back = [&] {  // the newcomers wait in front of the queue again
    joining_.insert(joining_.begin(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
    joining_sources_.insert(joining_sources_.begin(), std::make_move_iterator(sources.begin()),
                            std::make_move_iterator(sources.end()));
    taken.clear();
  };
  std::vector<uint64_t> first_step;
  bool deferred_encode = false;
  while (true) {
    try {
      // A step that grows the caches takes no encode along (the newcomers wait one step):
      // if the growth runs out of memory, nothing has run and the step can be repeated.
      int furthest = 0;
      for (const auto& a : lane.active) furthest = std::max(furthest, a->search.position());
      const int cached = engine_.cache_positions();
      deferred_encode = cached > 0 && furthest >= cached && !encode_items_.empty();
      in_.groups.clear();
      in_.tokens.clear();
      in_.cache_rows.clear();
      in_.parent_rows.clear();
      in_.running_scores.clear();
      first_step.clear();
      for (const auto& a : lane.active) {
        const SentenceSearch& s = a->search;
        in_.groups.push_back({a->slot, s.position(), s.beam(), s.k(), s.mask_eos(), s.force_eos()});
        for (int b = 0; b < s.beam(); ++b) {
          in_.tokens.push_back(s.tokens()[size_t(b)]);
          in_.cache_rows.push_back(a->rows[size_t(b)]);
          in_.parent_rows.push_back(a->rows[size_t(s.parents()[size_t(b)])]);
          in_.running_scores.push_back(s.running_scores()[size_t(b)]);
        }
        if (s.position() == 0) first_step.push_back(a->id);
      }
      in_.encode = encode_items_.empty() || deferred_encode ? nullptr : &encode_items_;
      if (in_.groups.empty() && !in_.encode) break;  // nothing to step or encode here
      engine_.submit(in_, l);
      lane.in_flight = true;
      break;
    } catch (const Error& e) {
      // A step without an encode runs out of memory only where the engines grow their
      // caches, before they change any state: it can be taken again without the sentences
      // that needed the growth. With an encode riding on it the engine may have failed
      // after the step itself ran (the CUDA engine allocates the encoder's buffers then),
      // so that step cannot be repeated; growth steps carry no encode (above) when the
      // engine says where its caches end.
      if (shed_on_out_of_memory_ && e.code() == ErrorCode::kResourceExhausted &&
          (encode_items_.empty() || deferred_encode) && shed_furthest(lane, e, report)) {
        continue;
      }
      give_back();
      drop_all();
      throw;
    } catch (...) {
      give_back();
      drop_all();
      throw;
    }
  }
  report->first_step.insert(report->first_step.end(), first_step.begin(), first_step.end());
  if (!lane.in_flight || deferred_encode) {
    give_back();  // the next step encodes them
    return;
  }
  report->encoded += int(taken.size());
  join(taken, lane.encoding);
}

void DecodeLoop::collect(int l, StepReport* report) {
  Lane& lane = lanes_[l];
  lane.in_flight = false;
  try {
    engine_.collect(l, &out_);
  } catch (...) {
    drop_all();
    throw;
  }
  size_t wanted = 0;
  for (const auto& a : lane.active) wanted += size_t(a->search.k());
  if (out_.scores.size() != wanted || out_.candidates.size() != wanted) {
    drop_all();
    throw Error(ErrorCode::kInternal, "decode loop: the engine returned " + std::to_string(out_.scores.size()) +
                                          " candidates for a step that asked " + std::to_string(wanted));
  }
  const int vocab = engine_.vocab_size();
  size_t offset = 0, kept = 0;
  for (size_t i = 0; i < lane.active.size(); ++i) {
    Active& a = *lane.active[i];
    const int k = a.search.k();
    const bool done = a.removed || a.search.advance(out_.scores.data() + offset, out_.candidates.data() + offset, vocab);
    offset += size_t(k);
    if (!done) {
      if (kept != i) lane.active[kept] = std::move(lane.active[i]);
      ++kept;
      continue;
    }
    if (!a.removed) {
      FinishedSentence f;
      f.id = a.id;
      f.steps = a.search.position();
      const DecodeResult r = a.search.result();
      for (size_t h = 0; h < r.ids.size(); ++h) {
        f.translation.hypotheses.push_back({r.ids[h], "", r.scores[h]});
      }
      report->finished.push_back(std::move(f));
    }
    release(a);
  }
  lane.active.resize(kept);
  join(lane.encoding, lane.active);  // encoded during this step: they decode from the next one
}

void DecodeLoop::join(ActiveList& from, ActiveList& into) {
  for (auto& a : from) {
    if (a->removed) continue;
    // Keep sentences ordered by beam: the engine runs one top-k per run of equal beams.
    const int beam = a->search.beam();
    auto at = std::upper_bound(into.begin(), into.end(), beam,
                               [](int b, const std::unique_ptr<Active>& x) { return b < x->search.beam(); });
    into.insert(at, std::move(a));
  }
  from.clear();
}

void DecodeLoop::drop_all() {
  for (int l = 0; l < Engine::kStepLanes; ++l) {
    Lane& lane = lanes_[l];
    if (lane.in_flight) {
      try {
        engine_.collect(l, &out_);  // frees the engine's lane; the results are dropped
      } catch (...) {  // the failure being reported already
      }
    }
    for (ActiveList* list : {&lane.active, &lane.encoding}) {
      for (auto& a : *list) release(*a);
      list->clear();
    }
    lane.in_flight = false;
  }
  for (auto& a : joining_) release(*a);
  joining_.clear();
  joining_sources_.clear();
}

bool DecodeLoop::shed_furthest(Lane& lane, const Error& e, StepReport* report) {
  if (lane.active.empty()) return false;
  int furthest = 0;
  for (const auto& a : lane.active) furthest = std::max(furthest, a->search.position());
  size_t kept = 0;
  for (size_t i = 0; i < lane.active.size(); ++i) {
    if (lane.active[i]->search.position() == furthest) {
      report->failed.push_back({lane.active[i]->id, e.code(), e.what()});
      release(*lane.active[i]);
      continue;
    }
    if (kept != i) lane.active[kept] = std::move(lane.active[i]);
    ++kept;
  }
  lane.active.resize(kept);
  return true;
}

// A sentence in a step in flight stays listed, marked, until that step is collected; its
// slot and rows are free at once (a newcomer's use of them is enqueued behind that step).
void DecodeLoop::remove(uint64_t id) {
  for (Lane& lane : lanes_) {
    for (ActiveList* list : {&lane.active, &lane.encoding}) {
      for (auto it = list->begin(); it != list->end(); ++it) {
        if ((*it)->id != id || (*it)->removed) continue;
        release(**it);
        if (lane.in_flight) {
          (*it)->removed = true;
        } else {
          list->erase(it);
        }
        return;
      }
    }
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
  if (a.slot < 0) return;
  free_slots_.push_back(a.slot);
  free_rows_.insert(free_rows_.end(), a.rows.begin(), a.rows.end());
  a.slot = -1;
  a.rows.clear();
  --sentences_;
}

}  // namespace nmt
