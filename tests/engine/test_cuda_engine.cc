// The CUDA engine step by step against the float32 CPU engine on the embedded demo model:
// encoder outputs, then decoder steps driven with identical inputs through the persistent
// decode state (sentences in arbitrary slots and cache rows, beam reorder, sentences joining
// at later steps and leaving, a newcomer reusing a leaver's slot and rows, mixed beams,
// per-sentence EOS masks), comparing the returned top-k log-probs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/decoding/beam_search.h"
#include "model/decoding/decode_loop.h"
#include "model/error.h"
#include "tests/engine/demo_engine.h"
#include "tests/support/golden.h"

using namespace nmt;
using nmt::test::cuda_engine;
using nmt::test::kSources;
using nmt::test::models;

namespace {

struct Diff {
  double max_score = 0;
  int ranks = 0, same_ids = 0;
};

// One sentence of a driven decode: kSources[source], joining at step `join`, leaving after
// step `leave` (-1: stays to the end).
struct Plan {
  int source, join, leave, beam;
};

// Every sentence with `beam`: sentence 2 joins at step 1 (sentences at different positions
// from then on), sentence 1 leaves after step 2 and sentence 3 takes its slot and cache rows.
std::vector<Plan> join_and_leave(int beam) {
  return {{0, 0, -1, beam}, {1, 0, 2, beam}, {2, 1, -1, beam}, {3, 3, -1, beam}};
}
// Beams 4, 1 and 2 in one step: three top-k runs.
const std::vector<Plan> kMixedBeams = {{0, 0, -1, 4}, {1, 0, 2, 1}, {2, 1, -1, 2}, {3, 3, -1, 4}};

// What the decode loop holds for an active sentence.
struct Active {
  Plan plan;
  int slot = 0, position = 0;
  std::vector<int> rows, tokens, parents;  // cache rows; parents are cache rows too
  std::vector<float> running;
};

EngineCapacity capacity_for(const std::vector<Plan>& plans) {
  EngineCapacity c;
  for (const Plan& p : plans) {
    c.sentences += 1;
    c.rows += p.beam;
    c.source_tokens = std::max(c.source_tokens, int(kSources[size_t(p.source)].size()));
  }
  return c;
}

// Pops the last free index: free lists start ascending, so the first sentence gets the
// highest slot and rows (slot != sentence, cache row != step row).
int pop(std::vector<int>& free) {
  const int i = free.back();
  free.pop_back();
  return i;
}

// Drives both engines with the same inputs for `steps` steps, the next inputs taken from the
// reference's choices (the first `beam` candidates of each sentence go on), groups ordered by
// beam as the decode loop does. mask_eos below position 2, force_eos at the last step.
Diff drive(Engine& ref, Engine& gpu, const std::vector<Plan>& plans, int steps, double tol) {
  const int vocab = ref.vocab_size();
  const EngineCapacity cap = capacity_for(plans);
  ref.reserve(cap);
  gpu.reserve(cap);
  std::vector<int> free_slots(size_t(cap.sentences)), free_rows(size_t(cap.rows));
  for (size_t i = 0; i < free_slots.size(); ++i) free_slots[i] = int(i);
  for (size_t i = 0; i < free_rows.size(); ++i) free_rows[i] = int(i);
  std::vector<Active> active;
  Diff diff;
  for (int t = 0; t < steps; ++t) {
    std::vector<EncodeItem> items;
    for (const Plan& p : plans) {
      if (p.join != t) continue;
      Active a;
      a.plan = p;
      a.slot = pop(free_slots);
      for (int b = 0; b < p.beam; ++b) a.rows.push_back(pop(free_rows));
      a.tokens.assign(size_t(p.beam), models().config.decoder_start_id);
      a.parents = a.rows;
      for (int b = 0; b < p.beam; ++b) a.running.push_back(b == 0 ? 0.f : -1e9f);
      items.push_back({&kSources[size_t(p.source)], a.slot});
      active.push_back(std::move(a));
    }
    if (!items.empty()) {
      ref.encode(items);
      gpu.encode(items);
    }
    std::stable_sort(active.begin(), active.end(),
                     [](const Active& x, const Active& y) { return x.plan.beam > y.plan.beam; });

    StepInput in;
    for (const Active& a : active) {
      StepGroup g;
      g.slot = a.slot;
      g.position = a.position;
      g.beam = a.plan.beam;
      g.k = topk_for_beam(a.plan.beam);
      g.mask_eos = a.position < 2;
      g.force_eos = t == steps - 1;
      in.groups.push_back(g);
      in.tokens.insert(in.tokens.end(), a.tokens.begin(), a.tokens.end());
      in.cache_rows.insert(in.cache_rows.end(), a.rows.begin(), a.rows.end());
      in.parent_rows.insert(in.parent_rows.end(), a.parents.begin(), a.parents.end());
      in.running_scores.insert(in.running_scores.end(), a.running.begin(), a.running.end());
    }
    StepOutput a, b;
    ref.step(in, &a);
    gpu.step(in, &b);
    EXPECT_EQ(a.scores.size(), b.scores.size());
    EXPECT_EQ(a.candidates.size(), b.candidates.size());
    if (a.scores.size() != b.scores.size() || a.candidates.size() != b.candidates.size()) return diff;
    for (size_t i = 0; i < a.scores.size(); ++i) {
      ++diff.ranks;
      diff.same_ids += a.candidates[i] == b.candidates[i];
      if (std::isinf(a.scores[i]) || std::isinf(b.scores[i])) {
        EXPECT_EQ(a.scores[i], b.scores[i]) << "step " << t << " entry " << i;
        continue;
      }
      const double d = std::fabs(double(a.scores[i]) - b.scores[i]);
      diff.max_score = std::max(diff.max_score, d);
      EXPECT_LE(d, tol) << "step " << t << " entry " << i << " ref " << a.scores[i] << " gpu "
                        << b.scores[i];
    }

    size_t first = 0;  // the sentence's first output
    for (Active& s : active) {
      const int k = topk_for_beam(s.plan.beam);
      for (int j = 0; j < s.plan.beam; ++j) {
        const int c = a.candidates[first + size_t(j)];
        s.tokens[size_t(j)] = c % vocab;
        s.parents[size_t(j)] = s.rows[size_t(c / vocab)];
        s.running[size_t(j)] = a.scores[first + size_t(j)];
      }
      ++s.position;
      first += size_t(k);
    }
    for (auto it = active.begin(); it != active.end();) {
      if (it->plan.leave != t) {
        ++it;
        continue;
      }
      // as the decode loop does (its steps here are collected at once): the memory goes back
      // before sentence 3 takes the slot and rows
      ref.release(it->slot, it->rows);
      gpu.release(it->slot, it->rows);
      free_slots.push_back(it->slot);
      free_rows.insert(free_rows.end(), it->rows.begin(), it->rows.end());
      it = active.erase(it);
    }
  }
  return diff;
}

// Encoded into slots 3, 2, 1, 0: encoder_output(i) is item i's whatever the slots.
double encoder_diff(Engine& ref, Engine& gpu) {
  std::vector<EncodeItem> items;
  int longest = 0;
  for (size_t s = 0; s < kSources.size(); ++s) {
    items.push_back({&kSources[s], int(kSources.size() - 1 - s)});
    longest = std::max(longest, int(kSources[s].size()));
  }
  const EngineCapacity cap{int(kSources.size()), int(kSources.size()), longest};
  ref.reserve(cap);
  gpu.reserve(cap);
  ref.encode(items);
  gpu.encode(items);
  double worst = 0;
  for (size_t s = 0; s < kSources.size(); ++s) {
    const auto a = ref.encoder_output(s), b = gpu.encoder_output(s);
    EXPECT_EQ(a.size(), b.size());
    EXPECT_EQ(b.size(), kSources[s].size() * size_t(models().config.d_model));
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  return worst;
}

void report(const char* what, const Diff& d) {
  std::cout << what << ": max |log-prob diff| " << d.max_score << ", same ids " << d.same_ids
            << " / " << d.ranks << "\n";
}

}  // namespace

TEST(CudaEngine, Float32StepsMatchCpuEngine) {
  SKIP_WITHOUT_GPU();
  auto ref = make_cpu_engine(models().config, models().weights);
  auto gpu = cuda_engine(Precision::kFloat32);
  const double enc = encoder_diff(*ref, *gpu);
  std::cout << "fp32 encoder output max |diff|: " << enc << "\n";
  EXPECT_LE(enc, 1e-4);
  for (int beam : {1, 4, 16}) {  // 16: the serving limit, k = 32
    const Diff d = drive(*ref, *gpu, join_and_leave(beam), 8, 1e-4);
    report(("fp32 beam " + std::to_string(beam)).c_str(), d);
    EXPECT_GE(d.same_ids, d.ranks * 98 / 100);
  }
  const Diff d = drive(*ref, *gpu, kMixedBeams, 8, 1e-4);
  report("fp32 mixed beams", d);
  EXPECT_GE(d.same_ids, d.ranks * 98 / 100);
  std::cout << "fp32 engine holds " << (gpu->memory_used() >> 20) << " MiB\n";
}

TEST(CudaEngine, Float16StepsMatchCpuEngine) {
  SKIP_WITHOUT_GPU();
  auto ref = make_cpu_engine(models().config, models().weights);
  auto gpu = cuda_engine(Precision::kFloat16);
  const double enc = encoder_diff(*ref, *gpu);
  std::cout << "fp16 encoder output max |diff|: " << enc << "\n";
  EXPECT_LE(enc, 0.1);
  for (int beam : {1, 4}) {
    const Diff d = drive(*ref, *gpu, join_and_leave(beam), 8, 5e-2);
    report(("fp16 beam " + std::to_string(beam)).c_str(), d);
    EXPECT_GE(d.same_ids, d.ranks * 80 / 100);
  }
  const Diff d = drive(*ref, *gpu, kMixedBeams, 8, 5e-2);
  report("fp16 mixed beams", d);
  EXPECT_GE(d.same_ids, d.ranks * 80 / 100);
  std::cout << "fp16 engine holds " << (gpu->memory_used() >> 20) << " MiB\n";
}

// Per-sentence EOS flags in one step: sentences 0 and 2 at max length (EOS forced, log-prob 0,
// as transformers' ForcedEOSTokenLogitsProcessor), sentence 1 below min length (EOS masked),
// sentence 3 neither; on both engines.
TEST(CudaEngine, PerSentenceEosFlags) {
  SKIP_WITHOUT_GPU();
  auto ref = make_cpu_engine(models().config, models().weights);
  for (Precision p : {Precision::kFloat32, Precision::kFloat16}) {
    auto gpu = cuda_engine(p);
    const int beam = 4, k = 8, vocab = ref->vocab_size(), eos = models().config.eos_id;
    const int n = int(kSources.size());
    std::vector<EncodeItem> items;
    for (int s = 0; s < n; ++s) items.push_back({&kSources[size_t(s)], n - 1 - s});
    const EngineCapacity cap{n, n * beam, int(kSources[1].size())};
    ref->reserve(cap);
    gpu->reserve(cap);
    ref->encode(items);
    gpu->encode(items);
    StepInput in;
    for (int s = 0; s < n; ++s) {
      StepGroup g;
      g.slot = n - 1 - s;
      g.beam = beam;
      g.k = k;
      g.force_eos = s % 2 == 0;
      g.mask_eos = s == 1;
      in.groups.push_back(g);
      for (int b = 0; b < beam; ++b) {
        in.tokens.push_back(models().config.decoder_start_id);
        in.cache_rows.push_back(n * beam - 1 - (s * beam + b));
        in.parent_rows.push_back(in.cache_rows.back());
        in.running_scores.push_back(-1.5f * float(b + s));
      }
    }
    StepOutput a, b;
    ref->step(in, &a);
    gpu->step(in, &b);
    ASSERT_EQ(a.scores.size(), size_t(n * k));
    ASSERT_EQ(b.scores.size(), size_t(n * k));
    for (int s = 0; s < n; ++s) {
      for (int j = 0; j < k; ++j) {
        const size_t i = size_t(s * k + j);
        if (s == 1) {
          EXPECT_NE(b.candidates[i] % vocab, eos) << "sentence 1 rank " << j;
        }
        if (s % 2 == 1) continue;
        EXPECT_EQ(a.candidates[i], b.candidates[i]) << "sentence " << s << " rank " << j;
        EXPECT_EQ(a.scores[i], b.scores[i]) << "sentence " << s << " rank " << j;
        if (j < beam) {
          EXPECT_EQ(b.candidates[i], j * vocab + eos) << "sentence " << s << " rank " << j;
          EXPECT_EQ(b.scores[i], in.running_scores[size_t(s * beam + j)]);
        } else {
          EXPECT_TRUE(std::isinf(b.scores[i]) && b.scores[i] < 0);
        }
      }
    }
  }
}

// An engine that never captures graphs (NMT_CUDA_GRAPHS=0 at its construction) and one that does.
std::pair<std::unique_ptr<Engine>, std::unique_ptr<Engine>> plain_and_graphed(Precision p) {
  setenv("NMT_CUDA_GRAPHS", "0", 1);
  auto plain = cuda_engine(p);
  unsetenv("NMT_CUDA_GRAPHS");
  return {std::move(plain), cuda_engine(p)};
}

// The captured decode graphs replay exactly what the plain stream launches compute, with rows
// moving between positions, slots and cache rows from step to step.
TEST(CudaEngine, GraphsEqualPlainLaunches) {
  SKIP_WITHOUT_GPU();
  auto [plain, graphed] = plain_and_graphed(Precision::kFloat16);
  for (const auto& plans : {join_and_leave(4), kMixedBeams}) {
    const Diff d = drive(*plain, *graphed, plans, 8, 0.0);
    EXPECT_EQ(d.same_ids, d.ranks);
  }
}

// An encode's graph (captured at its shape's second use, replayed from the third) writes the
// cross-attention K/V into the slots of each call, not those it was captured with: the same
// two sentences encoded into other slots each round, then a first step over those slots, give
// what plain launches give.
TEST(CudaEngine, EncodeGraphsWriteTheGivenSlots) {
  SKIP_WITHOUT_GPU();
  auto [plain, graphed] = plain_and_graphed(Precision::kFloat32);
  for (Engine* e : {plain.get(), graphed.get()}) e->reserve(EngineCapacity{8, 8, 32});
  for (int round = 0; round < 4; ++round) {
    const int first = 2 * round, second = (2 * round + 5) % 8;  // 0 5, 2 7, 4 1, 6 3
    const std::vector<int>& a = kSources[round % 2 ? 3 : 0];  // one shape every round
    const std::vector<int>& b = kSources[round % 2 ? 0 : 3];
    const std::vector<EncodeItem> items{{&a, first}, {&b, second}};
    StepInput in;
    for (int slot : {first, second}) {
      StepGroup g;
      g.slot = slot;
      g.k = 4;
      in.groups.push_back(g);
      in.tokens.push_back(models().config.decoder_start_id);
      in.cache_rows.push_back(slot);
      in.parent_rows.push_back(slot);
      in.running_scores.push_back(0.f);
    }
    StepOutput want, got;
    plain->encode(items);
    plain->step(in, &want);
    graphed->encode(items);
    graphed->step(in, &got);
    EXPECT_EQ(want.candidates, got.candidates) << "round " << round;
    ASSERT_EQ(want.scores.size(), got.scores.size());
    for (size_t i = 0; i < want.scores.size(); ++i)
      EXPECT_NEAR(want.scores[i], got.scores[i], 1e-4) << "round " << round << " output " << i;
  }
}

// Sentences that join a decode loop while others decode have their encode ride on a running
// step, which step() no longer waits for (the host advances the beams meanwhile), and steps
// follow the one in flight (two in flight, the sentences that finished in the older one still
// in the newer): every sentence still decodes as it does alone in the loop (float32: same
// tokens, same scores).
// Sentences admitted while others decode (their encode beside the step on the engine's
// encode stream) decode as alone, with `cap` slots and rows: one at a time, ten sentences of
// three beam sizes, two at first, then one more every second step.
static void expect_newcomers_decode_as_alone(const EngineCapacity& cap) {
  auto engine = cuda_engine(Precision::kFloat32);
  const ModelConfig& config = models().config;
  std::vector<DecodeOptions> options(3);
  options[0].beam_size = 4;
  options[1].beam_size = 2;
  options[2].beam_size = 1;
  for (DecodeOptions& o : options) o.return_scores = true;
  // Sentence i: source i % 4 with options i % 3.
  const int n = 10;
  auto source = [](int i) { return kSources[size_t(i) % kSources.size()]; };
  auto run = [&](DecodeLoop& loop, std::vector<FinishedSentence>* done) {
    for (FinishedSentence& f : loop.step().finished) done->push_back(std::move(f));
  };
  std::vector<Translation> alone(n);
  for (int i = 0; i < n; ++i) {
    DecodeLoop loop(*engine, config, cap);
    loop.admit({{uint64_t(i), source(i), options[size_t(i % 3)]}});
    std::vector<FinishedSentence> done;
    while (!loop.idle()) run(loop, &done);
    ASSERT_EQ(done.size(), 1u);
    alone[size_t(i)] = done[0].translation;
  }
  DecodeLoop loop(*engine, config, cap);
  std::vector<FinishedSentence> done;
  int next = 0;
  for (int step = 0; next < n || !loop.idle(); ++step) {
    if (next < n && (step == 0 || step % 2 == 1) && loop.can_admit(options[size_t(next % 3)])) {
      loop.admit({{uint64_t(next), source(next), options[size_t(next % 3)]}});
      ++next;
      if (step == 0 && loop.can_admit(options[size_t(next % 3)])) {
        loop.admit({{uint64_t(next), source(next), options[size_t(next % 3)]}});
        ++next;
      }
    }
    run(loop, &done);
  }
  ASSERT_EQ(done.size(), size_t(n));
  for (const FinishedSentence& f : done) {
    const Translation& want = alone[size_t(f.id)];
    ASSERT_EQ(want.hypotheses.size(), f.translation.hypotheses.size()) << "sentence " << f.id;
    for (size_t h = 0; h < want.hypotheses.size(); ++h) {
      EXPECT_EQ(want.hypotheses[h].ids, f.translation.hypotheses[h].ids) << "sentence " << f.id;
      EXPECT_NEAR(want.hypotheses[h].score, f.translation.hypotheses[h].score, 1e-4)
          << "sentence " << f.id;
    }
  }
}

TEST(CudaEngine, NewcomersEncodedDuringStepsDecodeAsAlone) {
  SKIP_WITHOUT_GPU();
  expect_newcomers_decode_as_alone(EngineCapacity{8, 32, 32});
}

// With room for two sentences each newcomer takes the slot a sentence left at the step
// before, while the step in flight still computes that sentence's rows once more: its encode
// must not overwrite the slot under that step, nor the step read the newcomer's half-written
// keys.
TEST(CudaEngine, NewcomersInJustFreedSlotsDecodeAsAlone) {
  SKIP_WITHOUT_GPU();
  expect_newcomers_decode_as_alone(EngineCapacity{2, 8, 32});
}

// A step that follows the one before (StepGroup::follows: its rows' tokens, parents and
// running scores from that step's top-k on the device, submitted before the host collected
// it) computes exactly what the step does with the host search's rows: two engines on the same
// weights, one driven as the decode loop drives it (two steps in flight, each following the
// one before), the other a step at a time with SentenceSearch's rows, give bit-equal
// candidates at every step. The sentences end together at their maximum length, so both
// engines step the same rows throughout.
TEST(CudaEngine, FollowingStepsEqualTheHostSearchsSteps) {
  SKIP_WITHOUT_GPU();
  const ModelConfig& config = models().config;
  for (const Precision p : {Precision::kFloat32, Precision::kFloat16}) {
    auto following = cuda_engine(p), stepped = cuda_engine(p);
    const EngineCapacity cap{4, 16, 32};
    std::vector<DecodeOptions> options(3);
    options[0].beam_size = 4;
    options[1].beam_size = 2;
    options[2].beam_size = 1;
    for (DecodeOptions& o : options) o.min_decoding_length = o.max_decoding_length = 9;
    std::vector<SentenceSearch> host, device_driven;
    std::vector<EncodeItem> items;
    for (size_t i = 0; i < options.size(); ++i) {
      host.emplace_back(options[i], config);
      device_driven.emplace_back(options[i], config);
      items.push_back({&kSources[i], int(i)});
    }
    for (Engine* e : {following.get(), stepped.get()}) {
      e->reserve(cap);
      e->encode(items);
    }
    // Rows of sentence i: cache rows 4i, 4i + 1, ...
    auto input = [&](const std::vector<SentenceSearch>& searches, int ahead, bool follow) {
      StepInput in;
      for (size_t i = 0; i < searches.size(); ++i) {
        const SentenceSearch& s = searches[i];
        in.groups.push_back({int(i), s.position() + ahead, s.beam(), s.k(), s.mask_eos(ahead), s.force_eos(ahead),
                             follow ? int(i) : -1});
        for (int b = 0; b < s.beam(); ++b) {
          in.tokens.push_back(s.tokens()[size_t(b)]);
          in.cache_rows.push_back(4 * int(i) + b);
          in.parent_rows.push_back(4 * int(i) + (follow ? b : s.parents()[size_t(b)]));
          in.running_scores.push_back(follow ? 0.f : s.running_scores()[size_t(b)]);
        }
      }
      return in;
    };
    auto advance = [&](std::vector<SentenceSearch>& searches, const StepOutput& out) {
      size_t offset = 0;
      bool done = false;
      for (SentenceSearch& s : searches) {
        done = s.advance(out.scores.data() + offset, out.candidates.data() + offset, config.target_vocab_size) || done;
        offset += size_t(s.k());
      }
      return done;
    };
    following->submit(input(device_driven, 0, false), 0);
    int lane = 0;
    for (int step = 0;; ++step) {
      const bool last = device_driven[0].force_eos();
      if (!last) following->submit(input(device_driven, 1, true), 1 - lane);  // follows the one in flight
      StepOutput got, want;
      following->collect(lane, &got);
      stepped->step(input(host, 0, false), &want);
      const std::string at = std::string(p == Precision::kFloat16 ? "float16" : "float32") + " step " + std::to_string(step);
      ASSERT_EQ(got.candidates, want.candidates) << at;
      ASSERT_EQ(got.scores, want.scores) << at;
      const bool done = advance(device_driven, got);
      EXPECT_EQ(advance(host, want), done) << at;
      if (last) {
        EXPECT_TRUE(done) << at;
        break;
      }
      ASSERT_LT(step, 20);
      lane = 1 - lane;
    }
  }
}

TEST(CudaEngine, MemoryLimitGivesResourceExhausted) {
  SKIP_WITHOUT_GPU();
  try {
    cuda_engine(Precision::kFloat32, size_t(1) << 20);
    ADD_FAILURE() << "a 1 MiB limit should not hold the weights";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    std::cout << "weights over the limit: " << e.what() << "\n";
  }
  // Weights fit, and so does a large logical capacity (its tables: the keys/values come with
  // use); encoding 256 sentences at once does not. The engine stays usable afterwards (the
  // server answers RESOURCE_EXHAUSTED and goes on).
  const size_t weights = cuda_engine(Precision::kFloat16)->memory_used();
  const size_t limit = weights + (size_t(4) << 20);
  auto gpu = cuda_engine(Precision::kFloat16, limit);
  gpu->reserve({256, 256 * 8, int(kSources[1].size())});
  EXPECT_LE(gpu->memory_used(), limit);
  std::vector<EncodeItem> items;
  for (int slot = 0; slot < 256; ++slot) items.push_back({&kSources[1], slot});
  try {
    gpu->encode(items);
    ADD_FAILURE() << "encoding 256 sentences should exceed the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    std::cout << "decode state over the limit: " << e.what() << "\n";
  }
  EXPECT_LE(gpu->memory_used(), limit);
  auto ref = make_cpu_engine(models().config, models().weights);
  const Diff d = drive(*ref, *gpu, join_and_leave(1), 4, 5e-2);
  EXPECT_EQ(d.same_ids, d.ranks);
  EXPECT_LE(gpu->memory_used(), limit);
}

// A first step of beam 4 for slots [0, slots), slot s in cache rows 4s..4s+3, each row its
// own parent (position 0; the caller moves it on).
static StepInput beams_in_own_rows(int slots) {
  StepInput in;
  for (int slot = 0; slot < slots; ++slot) {
    StepGroup g;
    g.slot = slot;
    g.beam = 4;
    g.k = topk_for_beam(4);
    in.groups.push_back(g);
    for (int b = 0; b < 4; ++b) {
      in.tokens.push_back(models().config.decoder_start_id);
      in.cache_rows.push_back(slot * 4 + b);
      in.parent_rows.push_back(slot * 4 + b);
      in.running_scores.push_back(b == 0 ? 0.f : -1e9f);
    }
  }
  return in;
}

// Issue 52: the decode state's memory follows use. A large logical capacity costs its tables
// only; encoding and stepping sentences takes memory with their tokens, and releasing them
// gives it back (after CudaEngine's retention, which a later release finds passed).
TEST(CudaEngine, DecodeStateMemoryFollowsUse) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda_engine(Precision::kFloat16);
  const size_t loaded = gpu->memory_used();
  gpu->reserve({256, 1024, 64});
  const size_t reserved = gpu->memory_used();
  // (the warm-up's state, which reserve() replaces, counts in `loaded`)
  EXPECT_LT(reserved, loaded + (size_t(64) << 20)) << "a logical capacity should cost its tables only";
  std::vector<EncodeItem> items;
  for (int slot = 0; slot < 256; ++slot) items.push_back({&kSources[size_t(slot) % kSources.size()], slot});
  gpu->encode(items);
  StepInput in = beams_in_own_rows(256);
  StepOutput out;
  for (int position = 0; position < 40; ++position) {
    for (StepGroup& g : in.groups) g.position = position;
    gpu->step(in, &out);  // each row continues itself: the positions fill its own blocks
  }
  const size_t loaded_state = gpu->memory_used();
  EXPECT_GT(loaded_state, reserved + (size_t(16) << 20)) << "256 x 4 rows at 40 positions should take memory";
  for (int slot = 0; slot < 256; ++slot) gpu->release(slot, {slot * 4, slot * 4 + 1, slot * 4 + 2, slot * 4 + 3});
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  gpu->release(0, {});  // past the retention: what use left goes back
  const size_t returned = gpu->memory_used();
  std::cout << "engine memory: loaded " << (loaded >> 20) << " MiB, reserved 256 x 1024 rows " << (reserved >> 20)
            << " MiB, under load " << (loaded_state >> 20) << " MiB, released " << (returned >> 20) << " MiB\n";
  EXPECT_LT(returned, loaded + (size_t(64) << 20));  // the encoder's buffers for 256 sentences stay
  EXPECT_LT(returned, loaded_state);
  // and the engine decodes as before afterwards
  auto ref = make_cpu_engine(models().config, models().weights);
  const Diff d = drive(*ref, *gpu, join_and_leave(4), 4, 5e-2);
  EXPECT_EQ(d.same_ids, d.ranks);
}

// Issue 56: a burst (a queue admitted at once, as after a reload) does not set the pools'
// floor: once one sentence is left, the engine holds what one sentence needs beyond none,
// not the burst's memory (a pool gives back whole pieces only, so the burst must not have
// come as one).
TEST(CudaEngine, PoolsShrinkBelowABurst) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda_engine(Precision::kFloat16);
  constexpr int kSlots = 256, kTokens = 200;
  gpu->reserve({kSlots, kSlots * 4, kTokens});
  std::vector<int> longest;
  for (int i = 0; i + 1 < kTokens; ++i) longest.push_back(kSources[1][size_t(i) % (kSources[1].size() - 1)]);
  longest.push_back(0);
  std::vector<EncodeItem> items;
  for (int slot = 0; slot < kSlots; ++slot) items.push_back({&longest, slot});
  gpu->encode(items);  // 51,200 source tokens' keys/values in one growth
  StepInput in = beams_in_own_rows(kSlots);
  StepOutput out;
  gpu->step(in, &out);
  const size_t burst = gpu->memory_used();
  // Releases, then a later release past the retention, which gives back what use left.
  auto release_and_trim = [&](int first, int last) {
    for (int slot = first; slot < last; ++slot)
      gpu->release(slot, {slot * 4, slot * 4 + 1, slot * 4 + 2, slot * 4 + 3});
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    gpu->release(-1, {});
    return gpu->memory_used();
  };
  const size_t one = release_and_trim(1, kSlots);
  const size_t none = release_and_trim(0, 1);
  std::cout << "engine memory: burst of " << kSlots << " x " << kTokens << " tokens " << (burst >> 20)
            << " MiB, one sentence left " << (one >> 20) << " MiB, none " << (none >> 20) << " MiB\n";
  EXPECT_GT(burst, none + (size_t(100) << 20)) << "the burst's keys/values should take memory";
  EXPECT_LE(one, none + (size_t(8) << 20)) << "one sentence left should hold about one sentence's memory";
}
