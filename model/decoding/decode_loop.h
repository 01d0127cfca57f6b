#pragma once
// The decode loop of one engine (docs/data-flow.md): sentences join at any decoder step and
// leave as soon as they finish. It owns the host side of the persistent decode state: which
// sentence slot and which cache rows each active sentence holds, and each sentence's beam
// search (beam_search.h). admit() gives new sentences free slots and rows; the next step()
// encodes them in one batched encoder pass beside that step's own work (the CUDA engine runs
// it on a stream of its own), so that the encode does not delay the sentences already
// decoding (they then take their first step at the step after; an idle loop encodes first
// and steps them at once). step() runs
// one decoder step over the active sentences, each at its own position with its own
// options, and returns those that finished, as ids and scores: their text is the caller's
// to make (Translator::translate_ids, the server's responder), after step() has submitted
// the next step, so that detokenizing overlaps the device's work instead of delaying it. A
// sentence's result never depends on what else is in the loop.
//
// On an engine that overlaps steps (a GPU's: Engine::submit() only enqueues) a step stays in
// flight across step() calls, so the caller's work between calls (answering, admitting) runs
// while the device computes. From follow_rows() rows on, two steps are in flight: step()
// collects the older one and advances its sentences' beams on the host while the device
// computes the newer one, then submits the next, which follows the newer one's beams as the
// device's top-k chose them (StepGroup::follows; the host's beam search makes the same choice,
// continuing_beams()). The device then never waits for the host's beam bookkeeping between
// two steps. The cost: a sentence that finished in the older step has its rows computed once
// more in the newer one (its results dropped); a step at the maximum length is
// a sentence's last and is never followed. It paid at every batch size measured, a lone
// sentence included (end-to-end run 41), so by default every step follows the one before.
//
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/beam_search.h"
#include "model/decoding/decode_options.h"
#include "model/decoding/engine.h"
#include "model/error.h"
#include "model/translator.h"

namespace nmt {

struct LoopSentence {
  uint64_t id = 0;  // the caller's name for it (unique among active sentences)
  std::vector<int> source_ids;  // </s> included
  DecodeOptions options;
};

struct FinishedSentence {
  uint64_t id = 0;
  Translation translation;  // hypotheses' ids and scores; texts empty
  int steps = 0;  // decoder steps it took
};

// A sentence the loop could not take further: the engine ran out of memory for what it
// needed (a cache growth to its position). Its slot and rows are free again.
struct FailedSentence {
  uint64_t id = 0;
  ErrorCode code = ErrorCode::kResourceExhausted;
  std::string message;
};

// What one step() did.
struct StepReport {
  std::vector<FinishedSentence> finished;
  std::vector<FailedSentence> failed;
  std::vector<uint64_t> first_step;  // sentences whose first decoder step this was
  int encoded = 0;                   // admitted sentences encoded by this call
  double encode_seconds = 0;         // an idle loop's encode before the step (else 0: overlapped)
};

class DecodeLoop {
 public:
  // Reserves `capacity` in the engine (throws nmt::Error(kResourceExhausted) when it does
  // not fit its memory limit). The engine must outlive the loop.
  DecodeLoop(Engine& engine, const ModelConfig& config, const EngineCapacity& capacity);
  ~DecodeLoop();

  const EngineCapacity& capacity() const { return capacity_; }
  // Whether the sentence could ever be admitted (empty loop); else why not.
  bool fits(size_t source_tokens, const DecodeOptions& options, std::string* why = nullptr) const;
  // Whether it can be admitted now.
  bool can_admit(const DecodeOptions& options) const;

  // Gives the sentences free slots and rows (each must pass can_admit() in turn; throws
  // nmt::Error otherwise, and the loop is unchanged); the next step() encodes them.
  void admit(std::vector<LoopSentence> sentences);
  // One decoder step (on an engine that overlaps steps: collects one, submits one; see above),
  // with the admitted ones' encode.
  // Throws nmt::Error when the engine fails: the active and admitted sentences are then
  // dropped and the loop is empty (its caller fails every sentence it gave the loop). With
  // shed_on_out_of_memory(), an out-of-memory (kResourceExhausted) on a step that encodes
  // no newcomers is handled instead: the sentences at the furthest position, whose cache
  // growth the engine could not make, leave as `failed` and the step is retried without
  // them, so the others go on. A step that grows the caches (Engine::cache_positions())
  // takes no newcomers' encode along: with one riding on it the engine could fail after
  // the step itself ran, and such a step, which cannot be repeated, still throws.
  StepReport step();
  // For callers that answer each sentence on its own (the server's Scheduler); a caller
  // that needs every sentence of a batch (Translator) keeps the default, throwing.
  void shed_on_out_of_memory(bool on) { shed_on_out_of_memory_ = on; }
  // Drops a sentence now (cancelled, expired); its slot and rows are free again once no step
  // in flight holds them (at once on an engine that does not overlap steps).
  void remove(uint64_t id);

  // Loops holding at least this many cache rows keep two steps in flight, each following the
  // one before; 0: never (one step in flight at a time, the host's rows for each).
  static constexpr int kDefaultFollowRows = 1;
  int follow_rows() const { return follow_rows_; }
  void set_follow_rows(int rows) { follow_rows_ = rows; }

  // No sentence holds a slot (one that left while a step in flight held it counts until
  // step() collects that step and releases it).
  bool idle() const { return sentences_ == 0; }
  // An idle loop's engine gives back what its last sentences left (Engine::trim_idle_memory),
  // once memory_retention() has passed since it went idle; not idle: nothing.
  std::chrono::milliseconds memory_retention() const { return engine_.memory_retention(); }
  void trim_idle_memory() {
    if (idle()) engine_.trim_idle_memory();
  }
  // Sentences holding slots (decoding, admitted and not yet stepped, or gone while a step in
  // flight holds them).
  int active_sentences() const { return sentences_; }
  int active_rows() const { return capacity_.rows - int(free_rows_.size()); }

 private:
  struct Active;
  using ActiveList = std::vector<std::unique_ptr<Active>>;
  // A step submitted and not yet collected: its engine lane and its sentences in group order.
  struct Flight {
    uint64_t number = 0;  // submission order
    int lane = 0;
    std::vector<Active*> members;
    std::vector<Active*> encoded;  // newcomers whose encode rode on it
  };
  // Submits the next step of the active sentences (and the newcomers' encode riding on it);
  // false when nothing was stepped.
  bool submit(StepReport* report);
  void collect(StepReport* report);  // the oldest flight
  void encode_idle(StepReport* report);  // nothing steps: encode every newcomer now
  void release(Active& a);               // frees its slot and rows, in the engine too (Engine::release)
  void leave(Active& a);                 // gone: out of the active list, kept while in flight
  void drop_all();
  // After an out-of-memory submit: the active sentences at the furthest position leave as
  // failed. False when none is active (nothing to shed).
  // members and positions: the step's sentences and their positions, in group order.
  bool shed_furthest(const std::vector<Active*>& members, const std::vector<int>& positions, const Error& e,
                     StepReport* report);
  static void join(ActiveList& from, ActiveList& into);  // in beam order
  const int* aligned_rows(size_t row, int beam);  // return_alignments: out_'s rows of a sentence
  // Repetition controls: an active, encoding or admitted sentence steps from its host state
  // (SentenceSearch::host_steps()): the loop keeps one step in flight.
  bool holds_host_steps() const;
  // Whether a sentence steps from its host state on this engine: SentenceSearch::host_steps(),
  // but for repetition controls the engine computes itself (Engine::repetition_on_device()).
  bool host_steps(const SentenceSearch& s) const {
    return s.host_steps() && !device_repetition(s);
  }
  // The engine computes this sentence's repetition controls itself (StepGroup's controls).
  bool device_repetition(const SentenceSearch& s) const { return engine_repetition_ && s.device_repetition(); }

  Engine& engine_;
  const bool engine_repetition_;  // engine_.repetition_on_device(), fixed for an engine
  const ModelConfig& config_;
  EngineCapacity capacity_;
  ActiveList active_;    // stepping, ordered by beam (the engine runs one top-k per run of equal beams)
  ActiveList encoding_;  // newcomers whose encode rides on the last submit: they step from the next
  ActiveList leaving_;   // finished or removed while a step in flight still holds them: their
                         // slots and rows are released when it is collected
  std::vector<Flight> flights_;  // oldest first, at most Engine::kStepLanes
  uint64_t submitted_ = 0;
  int follow_rows_ = kDefaultFollowRows;
  ActiveList joining_;                         // admitted, not yet encoded
  std::vector<LoopSentence> joining_sources_;  // their sources, for that encode
  int sentences_ = 0;                          // holding slots
  std::vector<EncodeItem> encode_items_;
  std::vector<int> free_slots_, free_rows_;  // stacks
  StepInput in_;
  StepOutput out_;
  bool shed_on_out_of_memory_ = false;
};

}  // namespace nmt
