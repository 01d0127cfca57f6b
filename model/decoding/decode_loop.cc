#include "model/decoding/decode_loop.h"

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
  bool gone = false;      // finished, removed or failed: stepped no more, its results dropped
  int in_flight = 0;      // flights that step it
  int held = 0;           // flights that step it or carry its encode: its slot and rows wait for them
  uint64_t newest = 0;    // the last flight it was submitted in, its group there, and whether
  int group = -1;         // that step is at the maximum length (its last: never followed)
  bool last = false;
};

DecodeLoop::DecodeLoop(Engine& engine, const ModelConfig& config, const EngineCapacity& capacity)
    : engine_(engine), engine_repetition_(engine.repetition_on_device()), config_(config), capacity_(capacity) {
  if (capacity.sentences < 1 || capacity.rows < 1 || capacity.source_tokens < 1)
    throw Error(ErrorCode::kInvalidArgument, "a decode loop needs at least one slot, row and token");
  engine_.reserve(capacity);
  // Stacks popped from the back: slots and rows are handed out lowest first.
  free_slots_.resize(size_t(capacity.sentences));
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);
  free_rows_.resize(size_t(capacity.rows));
  std::iota(free_rows_.rbegin(), free_rows_.rend(), 0);
}

// Steps still in flight are collected, their results dropped: the engine's lanes are then
// free for the next loop over it.
DecodeLoop::~DecodeLoop() {
  for (const Flight& f : flights_) {
    try {
      engine_.collect(f.lane, &out_);
    } catch (...) {  // a device error: the engine's next call reports it
    }
  }
  // The engine outlives the loop: what its sentences hold goes back to it.
  for (ActiveList* list : {&active_, &encoding_, &joining_, &leaving_}) {
    for (auto& a : *list) release(*a);
  }
}

bool DecodeLoop::fits(size_t source_tokens, const DecodeOptions& options, std::string* why) const {
  std::string reason;
  if (source_tokens > size_t(capacity_.source_tokens))
    reason = "a sentence of " + std::to_string(source_tokens) + " tokens exceeds the " +
             std::to_string(capacity_.source_tokens) + " tokens a decode slot holds";
  else if (options.rows() > capacity_.rows)
    reason = (options.samples() ? "samples " : "beam ") + std::to_string(options.rows()) + " exceeds the " +
             std::to_string(capacity_.rows) + " cache rows of a decode loop";
  if (why) *why = reason;
  return reason.empty();
}

bool DecodeLoop::can_admit(const DecodeOptions& options) const {
  return !free_slots_.empty() && int(free_rows_.size()) >= options.rows();
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
    for (int b = 0; b < s.options.rows(); ++b) {
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
    if (submit(&report)) collect(&report);
    return report;
  }
  if (active_.empty() && encoding_.empty()) {  // only finished sentences in flight
    while (!flights_.empty()) collect(&report);
  }
  // Two steps in flight while following pays, else one (the host's rows for each step).
  // A sentence that steps from its host state (SentenceSearch::host_steps()) holds the loop
  // to one step in flight (docs/decoding.md, "Repetition controls").
  const bool follow = follow_rows_ > 0 && active_rows() >= follow_rows_ && !holds_host_steps();
  while (flights_.size() >= (follow ? size_t(Engine::kStepLanes) : 1u)) collect(&report);
  const bool submitted = submit(&report);
  if (follow && submitted && flights_.size() == 1) {
    submit(&report);  // nothing else was in flight: the next step follows this one at once
  } else if (!submitted && !flights_.empty()) {
    collect(&report);  // nothing can step before a flight's results are in
  }
  return report;
}

// Nothing steps: encode every newcomer first and step them at once.
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
  join(joining_, active_);
  joining_sources_.clear();
}

bool DecodeLoop::submit(StepReport* report) {
  if (active_.empty() && encoding_.empty() && !joining_.empty()) encode_idle(report);
  join(encoding_, active_);  // their encode is ahead of this step on the device
  // Every newcomer's encode rides on this step; they step from the next one.
  ActiveList taken = std::move(joining_);
  std::vector<LoopSentence> sources = std::move(joining_sources_);
  joining_.clear();
  joining_sources_.clear();
  encode_items_.clear();
  for (size_t i = 0; i < taken.size(); ++i) encode_items_.push_back({&sources[i].source_ids, taken[i]->slot});
  auto give_back = [&] {  // the newcomers wait in front of the queue again
    joining_.insert(joining_.begin(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
    joining_sources_.insert(joining_sources_.begin(), std::make_move_iterator(sources.begin()),
                            std::make_move_iterator(sources.end()));
    taken.clear();
  };
  // A sentence of the newest flight follows it there (a step ahead of its host state); one
  // that a flight holds otherwise has its last step in flight.
  const Flight* newest = flights_.empty() ? nullptr : &flights_.back();
  const int lane = newest ? (newest->lane + 1) % Engine::kStepLanes : 0;
  std::vector<Active*> members;
  std::vector<int> positions;
  bool deferred_encode = false, stepped = false;
  while (true) {
    try {
      in_.groups.clear();
      in_.tokens.clear();
      in_.cache_rows.clear();
      in_.parent_rows.clear();
      in_.running_scores.clear();
      // Repetition controls: edits only where a sentence steps from its host state.
      in_.edit_begin.clear();
      in_.edit_tokens.clear();
      in_.edit_factors.clear();
      const bool edits = holds_host_steps();
      members.clear();
      positions.clear();
      for (const auto& a : active_) {
        // A sentence whose next step needs its host state (host_steps: repetition edits,
        // sampling's draws) never follows.
        const bool follows = newest && a->newest == newest->number && !host_steps(a->search);
        if (a->in_flight > 0 && (!follows || a->last)) continue;
        const int ahead = follows ? 1 : 0;
        const SentenceSearch& s = a->search;
        in_.groups.push_back({a->slot, s.position() + ahead, s.beam(), s.k(), s.mask_eos(ahead),
                              s.force_eos(ahead), follows ? a->group : -1, s.forced_token(ahead)});
        in_.groups.back().alignments = s.alignments();  // return_alignments
        in_.groups.back().teacher_forced = s.teacher_forced(ahead);  // Score (prefix-score)
        // sampling draws from the logits, a glossary sentence's search ranks them on the host
        in_.groups.back().return_logits = s.returns_logits();
        if (device_repetition(s)) {  // the engine's own edits
          in_.groups.back().no_repeat_ngram_size = s.options().no_repeat_ngram_size;
          in_.groups.back().repetition_penalty = s.options().repetition_penalty;
          in_.groups.back().edit_logits = s.beam() == 1;
        }
        for (int b = 0; b < s.beam(); ++b) {
          // a following row's token, parent and running score are the device's: these stand in
          in_.tokens.push_back(s.tokens()[size_t(b)]);
          in_.cache_rows.push_back(a->rows[size_t(b)]);
          in_.parent_rows.push_back(a->rows[size_t(follows ? b : s.parents()[size_t(b)])]);
          in_.running_scores.push_back(follows ? 0.f : s.running_scores()[size_t(b)]);
        }
        if (edits) {  // repetition controls: each row's edits from its beam's history
          in_.groups.back().edit_logits = s.beam() == 1;
          for (int b = 0; b < s.beam(); ++b) {
            in_.edit_begin.push_back(int(in_.edit_tokens.size()));
            // a sampling sentence's edits apply on the host, to the logits it draws from
            if (host_steps(a->search) && !s.samples()) a->search.token_edits(b, &in_.edit_tokens, &in_.edit_factors);
          }
        }
        members.push_back(a.get());
        positions.push_back(s.position() + ahead);
      }
      if (edits) in_.edit_begin.push_back(int(in_.edit_tokens.size()));
      // No row has an edit (the host-stepping sentences sample, or have none this step): the
      // engines' path without edits (StepInput::edit_begin).
      if (in_.edit_tokens.empty()) in_.edit_begin.clear();
      // A step that grows the caches takes no encode along (the newcomers wait one step):
      // if the growth runs out of memory, nothing has run and the step can be repeated.
      const int furthest = positions.empty() ? 0 : *std::max_element(positions.begin(), positions.end());
      const int cached = engine_.cache_positions();
      deferred_encode = cached > 0 && furthest >= cached && !encode_items_.empty();
      in_.encode = encode_items_.empty() || deferred_encode ? nullptr : &encode_items_;
      if (in_.groups.empty() && !in_.encode) break;  // nothing to step or encode
      engine_.submit(in_, lane);
      stepped = !in_.groups.empty();
      break;
    } catch (const Error& e) {
      // A step without an encode runs out of memory only where the engines grow their
      // caches, before they change any state: it can be taken again without the sentences
      // that needed the growth. With an encode riding on it the engine may have failed
      // after the step itself ran (the CUDA engine allocates the encoder's buffers then),
      // so that step cannot be repeated; growth steps carry no encode (above) when the
      // engine says where its caches end.
      if (shed_on_out_of_memory_ && e.code() == ErrorCode::kResourceExhausted &&
          (encode_items_.empty() || deferred_encode) && shed_furthest(members, positions, e, report)) {
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
  if (stepped) {
    Flight f{++submitted_, lane, members, {}};
    if (in_.encode) {  // their slots wait for this flight too
      for (auto& a : taken) {
        ++a->held;
        f.encoded.push_back(a.get());
      }
    }
    for (size_t g = 0; g < members.size(); ++g) {
      Active& a = *members[g];
      ++a.in_flight;
      ++a.held;
      a.newest = f.number;
      a.group = int(g);
      a.last = a.search.last_step(positions[g] - a.search.position());
      if (positions[g] == 0) report->first_step.push_back(a.id);
    }
    flights_.push_back(std::move(f));
  }
  if (!in_.encode) {
    give_back();  // the next step encodes them
  } else {
    report->encoded += int(taken.size());
    join(taken, encoding_);
  }
  return stepped;
}

void DecodeLoop::collect(StepReport* report) {
  Flight f = std::move(flights_.front());
  flights_.erase(flights_.begin());
  for (Active* a : f.members) {
    --a->in_flight;
    --a->held;
  }
  for (Active* a : f.encoded) --a->held;
  try {
    engine_.collect(f.lane, &out_);
  } catch (...) {
    drop_all();
    throw;
  }
  size_t wanted = 0;
  for (const Active* a : f.members) wanted += size_t(a->search.k());
  if (out_.scores.size() != wanted || out_.candidates.size() != wanted) {
    drop_all();
    throw Error(ErrorCode::kInternal, "decode loop: the engine returned " + std::to_string(out_.scores.size()) +
                                          " candidates for a step that asked " + std::to_string(wanted));
  }
  const int vocab = engine_.vocab_size();
  // Sampling and glossary sentences' rows' logits (StepGroup::return_logits), in group order.
  size_t logits_wanted = 0;
  for (const Active* a : f.members)
    logits_wanted += a->search.returns_logits() ? size_t(a->search.beam()) * size_t(vocab) : 0;
  if (out_.logits.size() != logits_wanted) {
    drop_all();
    throw Error(ErrorCode::kInternal, "decode loop: the engine returned " + std::to_string(out_.logits.size()) +
                                          " logits for a step that asked " + std::to_string(logits_wanted));
  }
  size_t offset = 0, logits_offset = 0;
  size_t row = 0;  // the sentence's first row in the step (StepOutput::alignments)
  for (Active* a : f.members) {
    const int k = a->search.k();
    const int* alignments = a->search.alignments() ? aligned_rows(row, a->search.beam()) : nullptr;
    row += size_t(a->search.beam());
    const float* logits = a->search.returns_logits() ? out_.logits.data() + logits_offset : nullptr;
    if (logits) logits_offset += size_t(a->search.beam()) * size_t(vocab);
    if (!a->gone && a->search.advance(out_.scores.data() + offset, out_.candidates.data() + offset, vocab,
                                      alignments, logits)) {
      FinishedSentence done;
      done.id = a->id;
      done.steps = a->search.position();
      const DecodeResult r = a->search.result();
      for (size_t h = 0; h < r.ids.size(); ++h) {
        Hypothesis hyp{r.ids[h], "", r.scores[h]};
        hyp.token_scores = r.token_scores[h];
        done.translation.hypotheses.push_back(std::move(hyp));
      }
      // return_alignments: the token indices; the Translator / the server add the byte ranges.
      for (size_t t = 0; t < r.alignments.size(); ++t)
        done.translation.hypotheses[0].alignments.push_back({int(t), r.alignments[t], 0, 0, 0, 0});
      report->finished.push_back(std::move(done));
      leave(*a);
    }
    offset += size_t(k);
  }
  // The gone ones no flight holds any more: their slots and rows are free now.
  leaving_.erase(std::remove_if(leaving_.begin(), leaving_.end(),
                                [&](const auto& a) {
                                  if (a->held > 0) return false;
                                  release(*a);
                                  return true;
                                }),
                 leaving_.end());
}

// The step's alignments of a sentence's rows [row, row + beam): an engine that returned none
// for a sentence that asked has broken the contract (a refused option would have been caught
// at validation), so that is an internal error rather than a hypothesis without them.
const int* DecodeLoop::aligned_rows(size_t row, int beam) {
  if (out_.alignments.size() < row + size_t(beam)) {
    drop_all();
    throw Error(ErrorCode::kInternal, "decode loop: the engine returned no alignments for a sentence that asked");
  }
  return out_.alignments.data() + row;
}

// Repetition controls: whether a sentence that steps (or is about to) needs its host state.
// Admitted ones count too: a submit encodes and steps them at once when the loop is idle, and
// a following step submitted right after would leave them out (the CUDA engine's key-row
// tables need every active sentence's rows in every step).
bool DecodeLoop::holds_host_steps() const {
  for (const ActiveList* list : {&active_, &encoding_, &joining_}) {
    for (const auto& a : *list) {
      if (!a->gone && host_steps(a->search)) return true;
    }
  }
  return false;
}

void DecodeLoop::join(ActiveList& from, ActiveList& into) {
  for (auto& a : from) {
    if (a->gone) continue;
    // Keep sentences ordered by beam: the engine runs one top-k per run of equal beams.
    const int beam = a->search.beam();
    auto at = std::upper_bound(into.begin(), into.end(), beam,
                               [](int b, const std::unique_ptr<Active>& x) { return b < x->search.beam(); });
    into.insert(at, std::move(a));
  }
  from.clear();
}

// Gone from the active list. Its slot and rows are released (free for newcomers, their
// memory back to the engine) once no step in flight reads or writes them: at once when none
// holds them, else in the collect() of the last that does (leaving_ keeps it until then).
void DecodeLoop::leave(Active& a) {
  a.gone = true;
  for (ActiveList* list : {&active_, &encoding_}) {
    auto it = std::find_if(list->begin(), list->end(), [&](const auto& x) { return x.get() == &a; });
    if (it == list->end()) continue;
    if (a.held > 0) {
      leaving_.push_back(std::move(*it));
    } else {
      release(a);
    }
    list->erase(it);
    return;
  }
  release(a);
}

void DecodeLoop::drop_all() {
  for (const Flight& f : flights_) {
    try {
      engine_.collect(f.lane, &out_);  // frees the engine's lane; the results are dropped
    } catch (...) {  // the failure being reported already
    }
  }
  flights_.clear();
  for (ActiveList* list : {&active_, &encoding_, &joining_, &leaving_}) {
    for (auto& a : *list) release(*a);
    list->clear();
  }
  joining_sources_.clear();
}

bool DecodeLoop::shed_furthest(const std::vector<Active*>& members, const std::vector<int>& positions,
                               const Error& e, StepReport* report) {
  if (members.empty()) return false;
  const int furthest = *std::max_element(positions.begin(), positions.end());
  for (size_t g = 0; g < members.size(); ++g) {
    if (positions[g] != furthest) continue;
    report->failed.push_back({members[g]->id, e.code(), e.what()});
    leave(*members[g]);
  }
  return true;
}

// A sentence in a step in flight stays, marked, until that step is collected, and its slot
// and rows with it (leave()).
void DecodeLoop::remove(uint64_t id) {
  for (ActiveList* list : {&active_, &encoding_}) {
    for (const auto& a : *list) {
      if (a->id != id) continue;
      leave(*a);
      return;
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

// The engine returns the memory behind the slot and rows before a newcomer gets them.
void DecodeLoop::release(Active& a) {
  if (a.slot < 0) return;
  engine_.release(a.slot, a.rows);
  free_slots_.push_back(a.slot);
  free_rows_.insert(free_rows_.end(), a.rows.begin(), a.rows.end());
  a.slot = -1;
  a.rows.clear();
  --sentences_;
}

}  // namespace nmt
