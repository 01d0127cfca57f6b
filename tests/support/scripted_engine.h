#pragma once
// An Engine without a model, for the decode loop and scheduler tests: the log-probs of a
// row depend only on its own sentence and state, as a real engine's do, so a sentence's
// result must not depend on its neighbours. Sentence s (its source ids) prefers EOS from
// step eos_step = source[0] on; before that token 1 + ((step + token) % 4) is likeliest.
// It records the rows of every step, can sleep per step (an engine's time) and fail on
// request, or run out of memory past a position; with `overlapping` it defers each step to
// collect(), as a device's engine does. Its gate holds steps for as long as a test needs a
// loop stopped inside a step, whatever the machine's speed. It counts release() calls and
// the misuses a paged engine could not survive: a release while a step in flight reads the
// slot or rows, an encode into a slot not released since its last encode.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/beam_search.h"
#include "model/decoding/engine.h"
#include "model/error.h"

namespace nmt::test {

class ScriptedEngine : public Engine {
 public:
  static constexpr int kVocab = 6, kEos = 0, kPad = 5;

  static ModelConfig config() {
    ModelConfig c;
    c.vocab_size = kVocab;
    c.eos_id = kEos;
    c.pad_id = kPad;
    c.decoder_start_id = kPad;
    c.max_positions = 1024;
    return c;
  }

  void reserve(const EngineCapacity& c) override {
    cap_ = {std::max(cap_.sentences, c.sentences), std::max(cap_.rows, c.rows),
            std::max(cap_.source_tokens, c.source_tokens)};
    eos_step_.resize(size_t(cap_.sentences));
    live_.resize(size_t(cap_.sentences));
  }
  EngineCapacity capacity() const override { return cap_; }
  int vocab_size() const override { return kVocab; }
  std::vector<float> encoder_output(size_t) const override { return {}; }
  // As an engine whose caches end at out_of_memory_at_position and cannot grow, when told
  // to say so.
  int cache_positions() const override {
    return report_cache_positions ? std::max(0, out_of_memory_at_position.load()) : 0;
  }

  void encode(const std::vector<EncodeItem>& items) override {
    for (const EncodeItem& item : items) {
      if (item.slot < 0 || item.slot >= cap_.sentences) throw std::logic_error("slot out of range");
      eos_step_[size_t(item.slot)] = item.ids->front();
      if (live_[size_t(item.slot)]) ++unreleased_reuses;
      live_[size_t(item.slot)] = 1;
    }
    encoded += int(items.size());
  }

  void release(int slot, const std::vector<int>& rows) override {
    ++releases;
    if (slot >= 0 && size_t(slot) < live_.size()) live_[size_t(slot)] = 0;
    for (const Pending& p : pending_) {
      if (!p.in_flight) continue;
      bool held = std::find(p.slots.begin(), p.slots.end(), slot) != p.slots.end();
      for (int r : rows) held = held || std::find(p.rows.begin(), p.rows.end(), r) != p.rows.end();
      if (held) ++early_releases;
    }
  }

  std::chrono::milliseconds memory_retention() const override { return std::chrono::milliseconds(retention_ms); }
  void trim_idle_memory() override {
    ++idle_trims;
    if (std::any_of(live_.begin(), live_.end(), [](char l) { return l != 0; })) ++busy_trims;
    for (const Pending& p : pending_) busy_trims += p.in_flight ? 1 : 0;
  }

  void step(const StepInput& in, StepOutput* out) override {
    if (fail_next_step.exchange(false)) throw Error(ErrorCode::kResourceExhausted, "scripted out of memory");
    for (const StepGroup& g : in.groups) {
      if (out_of_memory_at_position >= 0 && g.position >= out_of_memory_at_position) {
        throw Error(ErrorCode::kResourceExhausted, "scripted out of memory growing the caches");
      }
    }
    compute(in, out);
    if (in.encode) encode(*in.encode);
  }

  // The gate: after hold() steps wait at it (the loop stays inside that step while the
  // scheduler's other threads go on), allow(n) lets n more pass before it holds again, and
  // release() opens it.
  void hold() { set_permits(0); }
  void allow(int steps) { set_permits(steps); }
  void release() { set_permits(-1); }
  // Whether, within `timeout` (0: now), the steps allowed have passed and the next waits at
  // the gate.
  bool wait_held_step(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(gate_mutex_);
    return gate_.wait_for(lock, timeout, [&] { return waiting_ > 0 && permits_ == 0; });
  }

  // The step's candidates (an engine's time: step_delay).
  void compute(const StepInput& in, StepOutput* out) {
    {
      std::unique_lock<std::mutex> lock(gate_mutex_);
      if (permits_ == 0) {
        ++waiting_;
        gate_.notify_all();
        gate_.wait(lock, [&] { return permits_ != 0; });
        --waiting_;
      }
      if (permits_ > 0) --permits_;
    }
    if (step_delay.count() > 0) std::this_thread::sleep_for(step_delay);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      rows_per_step.push_back(in.tokens.size());
    }
    out->scores.clear();
    out->candidates.clear();
    out->logits.clear();
    size_t first = 0;
    for (const StepGroup& g : in.groups) {
      std::vector<float> s(size_t(g.beam) * kVocab);
      for (int b = 0; b < g.beam; ++b) {
        const size_t r = first + size_t(b);
        const std::vector<float> lp = log_probs(g, in.tokens[r], eos_step_[size_t(g.slot)]);
        for (int t = 0; t < kVocab; ++t) s[size_t(b * kVocab + t)] = lp[size_t(t)] + in.running_scores[r];
        // Sampling groups (StepGroup::return_logits): the row's scores as its logits, masks
        // already applied (the host's masks then change nothing).
        if (g.return_logits) out->logits.insert(out->logits.end(), lp.begin(), lp.end());
      }
      std::vector<int> order(s.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[size_t(a)] > s[size_t(b)]; });
      for (int j = 0; j < g.k; ++j) {
        out->scores.push_back(s[size_t(order[size_t(j)])]);
        out->candidates.push_back(order[size_t(j)]);
      }
      first += size_t(g.beam);
    }
  }

  // With `overlapping`, as a device's engine: submit() checks the step, takes the rows that
  // follow the previous submit (StepGroup::follows) from that step's continuing beams, and
  // computes it; collect() returns it (a step fails there when fail_next_step is set). A lane
  // takes one step at a time; a submit without sentences only encodes and takes no lane, as
  // the CUDA engine's. The lane of each submitted step is recorded (lanes()), and how many
  // groups followed.
  bool overlaps_steps() const override { return overlapping; }
  // With `device_repetition` (and `overlapping`), as the CUDA engine: it takes
  // no_repeat_ngram_size / repetition_penalty per group (StepGroup) and computes their edits
  // itself (here: ignores them, as it ignores the host's); controlled_groups counts the
  // groups that carried them, host_edits the host's edit entries submitted.
  bool repetition_on_device() const override { return overlapping && device_repetition; }
  void submit(const StepInput& given, int lane) override {
    if (!overlapping) return Engine::submit(given, lane);
    if (lane < 0 || lane >= kStepLanes || pending_[size_t(lane)].in_flight)
      throw std::logic_error("submit to a lane with a step in flight");
    for (const StepGroup& g : given.groups) {
      if (out_of_memory_at_position >= 0 && g.position >= out_of_memory_at_position)
        throw Error(ErrorCode::kResourceExhausted, "scripted out of memory growing the caches");
    }
    if (given.groups.empty()) {
      if (given.encode) encode(*given.encode);
      return;
    }
    StepInput in = given;
    in.encode = nullptr;
    host_edits += int(given.edit_tokens.size());
    for (const StepGroup& g : given.groups) controlled_groups += g.device_repetition();
    size_t first = 0;
    for (const StepGroup& g : in.groups) {
      if (g.follows >= 0) {
        if (size_t(g.follows) >= continuing_.size() || continuing_[size_t(g.follows)].size() != size_t(g.beam))
          throw std::logic_error("a group follows no group of its beam in the previous step");
        for (int b = 0; b < g.beam; ++b) {
          const Row& r = continuing_[size_t(g.follows)][size_t(b)];
          in.tokens[first + size_t(b)] = r.token;
          in.parent_rows[first + size_t(b)] = r.parent_row;
          in.running_scores[first + size_t(b)] = r.running;
        }
        ++followed_groups;
      }
      first += size_t(g.beam);
    }
    Pending& p = pending_[size_t(lane)];
    p.in_flight = true;
    p.slots.clear();
    p.rows = in.cache_rows;
    p.rows.insert(p.rows.end(), in.parent_rows.begin(), in.parent_rows.end());
    for (const StepGroup& g : in.groups) p.slots.push_back(g.slot);
    if (given.encode) {
      for (const EncodeItem& item : *given.encode) p.slots.push_back(item.slot);
    }
    compute(in, &p.out);
    note_continuing(in, p.out);
    if (given.encode) encode(*given.encode);
    std::lock_guard<std::mutex> lock(mutex_);
    lanes_submitted_.push_back(lane);
  }
  void collect(int lane, StepOutput* out) override {
    if (!overlapping) return Engine::collect(lane, out);
    Pending& p = pending_.at(size_t(lane));
    out->scores.clear();
    out->candidates.clear();
    if (!p.in_flight) return;
    p.in_flight = false;
    if (fail_next_step.exchange(false)) throw Error(ErrorCode::kResourceExhausted, "scripted out of memory");
    std::swap(*out, p.out);
  }

  std::vector<size_t> steps() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rows_per_step;
  }

  std::chrono::milliseconds step_delay{0};
  std::atomic<bool> fail_next_step{false};
  // A step with a sentence at this position or beyond fails as a cache growth past the
  // memory limit would, before any state changes (-1: never).
  std::atomic<int> out_of_memory_at_position{-1};
  bool report_cache_positions = true;
  std::atomic<int> encoded{0};
  bool overlapping = false;
  bool device_repetition = false;
  std::atomic<int> controlled_groups{0}, host_edits{0};
  std::atomic<int> releases{0};          // release() calls
  std::atomic<int> retention_ms{0};      // memory_retention()
  std::atomic<int> idle_trims{0};        // trim_idle_memory() calls
  std::atomic<int> busy_trims{0};        // of them, while a slot held a sentence or a step was in flight
  std::atomic<int> early_releases{0};    // releases of a slot or row that a step in flight reads
  std::atomic<int> unreleased_reuses{0};  // encodes into a slot still holding its last sentence
  std::atomic<int> followed_groups{0};  // with `overlapping`: groups that followed the step before
  std::vector<int> lanes() const {      // with `overlapping`: the lane of each submit() so far
    std::lock_guard<std::mutex> lock(mutex_);
    return lanes_submitted_;
  }

 private:
  static std::vector<float> log_probs(const StepGroup& g, int token, int eos_step) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    std::vector<float> lp(kVocab, std::log(0.02f));
    lp[size_t(1 + ((g.position + token) % 4))] = std::log(0.6f);
    lp[size_t(1 + ((g.position + token + 1) % 4))] = std::log(0.2f);
    lp[kEos] = g.position >= eos_step ? std::log(0.9f) : std::log(0.1f);
    lp[kPad] = neg_inf;
    if (g.mask_eos) lp[kEos] = neg_inf;
    if (g.forced_token >= 0) {  // the forced first token: only it, with log-prob 0
      std::fill(lp.begin(), lp.end(), neg_inf);
      lp[size_t(g.forced_token)] = 0.f;
    }
    if (g.force_eos) {  // as transformers: only EOS, with log-prob 0 (after a forced token)
      std::fill(lp.begin(), lp.end(), neg_inf);
      lp[kEos] = 0.f;
    }
    return lp;
  }

  // The beams each group of the last submitted step goes on with, as a device's top-k
  // writes them for the next step to follow.
  struct Row {
    int token, parent_row;
    float running;
  };
  void note_continuing(const StepInput& in, const StepOutput& out) {
    continuing_.clear();
    size_t first = 0, offset = 0;
    for (const StepGroup& g : in.groups) {
      std::vector<char> hits(static_cast<size_t>(g.k));
      std::vector<float> running(static_cast<size_t>(g.k));
      std::vector<int> keep(static_cast<size_t>(g.beam));
      for (int j = 0; j < g.k; ++j) hits[size_t(j)] = out.candidates[offset + size_t(j)] % kVocab == kEos || g.force_eos;
      continuing_beams(out.scores.data() + offset, hits.data(), g.k, g.beam, running.data(), keep.data());
      std::vector<Row> rows;
      for (int b = 0; b < g.beam; ++b) {
        const int j = keep[size_t(b)], c = out.candidates[offset + size_t(j)];
        rows.push_back({c % kVocab, in.cache_rows[first + size_t(c / kVocab)], running[size_t(j)]});
      }
      continuing_.push_back(std::move(rows));
      first += size_t(g.beam);
      offset += size_t(g.k);
    }
  }

  struct Pending {
    StepOutput out;
    bool in_flight = false;
    std::vector<int> slots, rows;  // what the step reads and writes
  };
  std::vector<std::vector<Row>> continuing_;
  std::array<Pending, kStepLanes> pending_;
  EngineCapacity cap_;
  std::vector<int> eos_step_;  // per slot
  std::vector<char> live_;     // per slot: encoded and not released since
  mutable std::mutex mutex_;
  std::vector<int> lanes_submitted_;  // under mutex_: loops may still step while a test reads it
  std::vector<size_t> rows_per_step;
  void set_permits(int n) {
    {
      std::lock_guard<std::mutex> lock(gate_mutex_);
      permits_ = n;
    }
    gate_.notify_all();
  }
  std::mutex gate_mutex_;
  std::condition_variable gate_;
  int permits_ = -1;  // steps the gate lets pass (-1: all), under gate_mutex_
  int waiting_ = 0;   // steps waiting at the gate, under gate_mutex_
};

}  // namespace nmt::test
