// beam_topk_cuda against beam_topk_cpu: exact indices, scores to the type's tolerance, on each
// of its kernel paths (beam_topk_path: every case list below must reach all three); and the
// rows each sentence goes on with (NextRows) against the host search's continuing_beams() on
// the kernels' own candidates, to the bit.
#include "tests/kernels/cuda_test_util.h"

#include <numeric>
#include <random>

#if NMT_WITH_CUDA
#include "kernels/topk.h"
#include "model/decoding/beam_search.h"

namespace nmt::kernels::test {
namespace {

template <typename T>
using BeamTopkCuda = CudaKernelTest<T>;
TYPED_TEST_SUITE(BeamTopkCuda, KernelElementTypes);

struct Case {
  int64_t sentences;
  int beam, vocab, k;
  bool bias;
  TopkMasks masks;
  int pad = 0;  // logits row stride = vocab + pad (padding columns hold huge values)
};

BeamTopkPath path_of(const Case& c) { return beam_topk_path(c.sentences * c.beam, c.vocab, c.k); }

const char* path_name(BeamTopkPath p) {
  switch (p) {
    case BeamTopkPath::kRow: return "row";
    case BeamTopkPath::kTwoPass: return "two-pass";
    case BeamTopkPath::kOnePass: return "one-pass";
  }
  return "?";
}

// A case list that misses a path would leave that path's kernels untested (e.g. after the
// dispatch thresholds move).
template <size_t N>
void expect_every_path(const Case (&cases)[N]) {
  for (BeamTopkPath p : {BeamTopkPath::kRow, BeamTopkPath::kTwoPass, BeamTopkPath::kOnePass})
    EXPECT_TRUE(std::any_of(cases, cases + N, [&](const Case& c) { return path_of(c) == p; }))
        << "no case takes the " << path_name(p) << " path";
}

TopkMasks masks(int pad, int eos, bool mask_eos, bool force_eos) {
  TopkMasks m;
  m.pad_id = pad;
  m.eos_id = eos;
  m.mask_eos = mask_eos;
  m.force_eos = force_eos;
  return m;
}

const Case kCases[] = {
    // Marian-sized vocabulary; two-pass, chunks of 3420 tokens held in registers
    {16, 4, 58101, 8, true, masks(58100, 0, false, false)},
    {3, 4, 1000, 8, false, masks(0, 1, true, false)},
    {5, 2, 7, 4, true, masks(-1, -1, false, false)},         // tiny vocabulary
    {2, 16, 3001, 32, true, masks(3, 2, false, false)},      // the largest k
    {7, 1, 32003, 1, false, masks(5, 6, false, false)},      // greedy
    {4, 3, 5000, 5, true, masks(0, 4999, false, true)},      // forced EOS (scores 0)
    {64, 4, 8001, 8, true, masks(1, 0, false, true), 7},     // demo model at max length
    {32, 4, 8001, 8, true, masks(1, 0, false, false), 7},    // one chunk per row, padded rows
    {64, 4, 58101, 8, true, masks(58100, 0, true, false), 3},  // 15 held chunks a row
    {1, 2, 300000, 4, true, masks(0, 1, true, false)},  // 64 chunks of 4688: sorted lists
    {32, 4, 3001, 8, false, masks(0, 1, true, false)},       // row path, short rows
    {128, 1, 16384, 1, true, masks(2, 3, false, false), 5},  // row path, 64 a thread, greedy
    {8, 16, 12000, 32, true, masks(0, 1, false, false)},     // one chunk a row, k > 8
    {1, 4, 70000, 3, true, masks(1, 0, false, false)},       // many chunks per row
    // >= 512 rows wider than 16384: the one-pass path, chunks of at most 8192 tokens a row
    {128, 4, 16411, 8, true, masks(16410, 0, true, false), 3},
    {272, 4, 16411, 8, true, masks(0, 1, false, false)},
    {128, 4, 58101, 8, true, masks(58100, 0, false, false), 3},  // Transformer-base, 8 chunks
};

// flags: one byte per sentence for TopkMasks::sentence_flags (empty: the global masks).
// Variations of the random inputs that make many final scores tie.
struct Ties {
  bool integer_logits = false;  // logits in -3..3: many equal logits (no bias)
  float running_all = 0.f;      // != 0: every row's running score (-1e9 swallows the logits)
  // logits in steps of 1/16 (no bias): tens of equal logits at the top of each row, few
  // enough that the register paths rank them in shared memory rather than falling back
  bool sixteenths = false;
};

template <typename T>
// forced: one token per sentence for TopkMasks::forced_tokens (read under kTopkForceToken).
void check(const Case& c, uint32_t seed, const std::vector<unsigned char>& flags = {},
           Ties ties = {}, const std::vector<int>& forced_tokens = {}) {
  const int64_t rows = c.sentences * c.beam;
  auto logits = random_vector(size_t(rows * c.vocab), -8.f, 8.f, seed);
  if (ties.integer_logits)
    for (float& x : logits) x = std::round(x * 3.f / 8.f);
  if (ties.sixteenths)
    for (float& x : logits) x = std::round(x * 16.f) / 16.f;
  round_to<T>(logits);
  auto bias = random_vector(size_t(c.vocab), -1.f, 1.f, seed + 1);
  auto running = random_vector(size_t(rows), -12.f, 0.f, seed + 2);
  running[1 % rows] = -1e9f;  // a dead beam, as at the first step
  if (ties.running_all != 0.f) std::fill(running.begin(), running.end(), ties.running_all);
  const bool use_bias = c.bias && !ties.integer_logits && !ties.sixteenths;
  std::vector<float> ref_s(size_t(c.sentences * c.k));
  std::vector<int> ref_i(ref_s.size());
  TopkMasks host_masks = c.masks;
  if (!flags.empty()) host_masks.sentence_flags = flags.data();
  if (!forced_tokens.empty()) host_masks.forced_tokens = forced_tokens.data();
  beam_topk_cpu(logits.data(), use_bias ? bias.data() : nullptr, running.data(), c.sentences,
                c.beam, c.vocab, c.k, host_masks, ref_s.data(), ref_i.data());

  const int64_t stride = c.vocab + c.pad;
  std::vector<float> strided(size_t(rows * stride), 6e4f);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(logits.begin() + r * c.vocab, logits.begin() + (r + 1) * c.vocab,
              strided.begin() + r * stride);
  DeviceBuffer<T> dlogits(strided);
  DeviceBuffer<float> dbias(bias), drunning(running), dscores(ref_s.size());
  DeviceInts dindex(ref_i.size());
  const size_t ws_bytes = beam_topk_workspace_bytes(c.sentences, c.beam, c.vocab, c.k);
  DeviceBuffer<char> ws(ws_bytes), dflags(flags.size());
  DeviceInts dforced(forced_tokens);
  TopkMasks device_masks = c.masks;
  if (!forced_tokens.empty()) device_masks.forced_tokens = dforced.get();
  if (!flags.empty()) {
    NMT_CHECK_CUDA(cudaMemcpy(dflags.get(), flags.data(), flags.size(), cudaMemcpyHostToDevice));
    device_masks.sentence_flags = reinterpret_cast<const unsigned char*>(dflags.get());
  }
  // Next rows wherever there is an EOS to end hypotheses; cache rows in a shuffled order.
  const bool with_next = c.masks.eos_id >= 0;
  std::vector<int> cache_rows(static_cast<size_t>(rows));
  std::iota(cache_rows.begin(), cache_rows.end(), 100);
  std::shuffle(cache_rows.begin(), cache_rows.end(), std::mt19937(seed));
  DeviceInts dcache(cache_rows), dtokens(static_cast<size_t>(rows)), dparents(static_cast<size_t>(rows));
  DeviceBuffer<float> dnext_running(static_cast<size_t>(rows));
  NextRows next;
  next.cache_rows = dcache.get();
  next.tokens = dtokens.get();
  next.parents = dparents.get();
  next.running = dnext_running.get();
  beam_topk_cuda<T>(dlogits.get(), use_bias ? dbias.get() : nullptr, drunning.get(), c.sentences,
                    c.beam, c.vocab, c.k, device_masks, dscores.get(), dindex.get(), ws.get(),
                    ws_bytes, nullptr, c.pad ? stride : 0, with_next ? &next : nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  const std::string what = std::string(type_name<T>()) + " " + path_name(path_of(c)) +
                           " sentences=" +
                           std::to_string(c.sentences) + " beam=" + std::to_string(c.beam) +
                           " vocab=" + std::to_string(c.vocab) + " k=" + std::to_string(c.k) +
                           (flags.empty() ? "" : " per-sentence flags") +
                           (forced_tokens.empty() ? "" : " forced tokens") +
                           (ties.integer_logits ? " integer logits" : "") +
                           (ties.sixteenths ? " logits in sixteenths" : "") +
                           (ties.running_all != 0.f ? " running " + std::to_string(ties.running_all) : "");
  const std::vector<int> got_i = dindex.download();
  const std::vector<float> got_s = dscores.download();
  EXPECT_EQ(got_i, ref_i) << what;
  // scores are float32 sums of the same inputs: float32 tolerance for every T
  NMT_EXPECT_CLOSE(got_s, ref_s, 1e-5f, what);
  if (!with_next) return;
  const std::vector<int> tokens = dtokens.download(), parents = dparents.download();
  const std::vector<float> next_running = dnext_running.download();
  for (int64_t s = 0; s < c.sentences; ++s) {
    const bool forced = flags.empty() ? c.masks.force_eos : (flags[size_t(s)] & kTopkForceEos) != 0;
    const float* v = got_s.data() + s * c.k;
    const int* idx = got_i.data() + s * c.k;
    std::vector<char> hits(static_cast<size_t>(c.k));
    for (int j = 0; j < c.k; ++j) hits[size_t(j)] = idx[j] % c.vocab == c.masks.eos_id || forced;
    std::vector<float> running_view(static_cast<size_t>(c.k));
    std::vector<int> keep(static_cast<size_t>(c.beam));
    continuing_beams(v, hits.data(), c.k, c.beam, running_view.data(), keep.data());
    for (int b = 0; b < std::min(c.beam, c.k); ++b) {  // the search asks k >= beam
      const int j = keep[size_t(b)];
      const size_t row = size_t(s * c.beam + b);
      EXPECT_EQ(tokens[row], idx[j] % c.vocab) << what << " sentence " << s << " beam " << b;
      EXPECT_EQ(parents[row], cache_rows[size_t(s * c.beam + idx[j] / c.vocab)]) << what << " sentence " << s << " beam " << b;
      EXPECT_EQ(next_running[row], running_view[size_t(j)]) << what << " sentence " << s << " beam " << b;
    }
  }
}

TYPED_TEST(BeamTopkCuda, MatchesReference) {
  expect_every_path(kCases);
  uint32_t seed = 5;
  for (const Case& c : kCases) check<TypeParam>(c, seed += 11);
}

// Per-sentence masks (sentences at different lengths in one call): every combination of the
// two bits, on every path (and k > 8, greedy). The global masks say force_eos, which the flags
// must override.
TYPED_TEST(BeamTopkCuda, PerSentenceFlags) {
  const Case cases[] = {
      {64, 4, 8001, 8, true, masks(1, 0, false, true), 7},     // row path
      {3, 4, 58101, 8, true, masks(58100, 0, false, true)},     // two-pass, chunks
      {6, 16, 3001, 32, true, masks(3, 2, true, true)},         // two-pass, k > 8
      {9, 1, 32003, 1, false, masks(5, 6, false, true)},        // two-pass, greedy
      {130, 4, 16411, 8, true, masks(16410, 0, false, true)},   // one-pass
  };
  expect_every_path(cases);
  uint32_t seed = 901;
  for (const Case& c : cases) {
    std::vector<unsigned char> flags(static_cast<size_t>(c.sentences));
    for (size_t s = 0; s < flags.size(); ++s) flags[s] = (unsigned char)(s * 7 % 4);
    check<TypeParam>(c, seed += 13, flags);
  }
}

// Final scores that tie although the logits differ (running scores of -1e9 round every
// (logit - lse) away: the k best are the k lowest unmasked indices), and many equal logits.
// The one-pass chunks select on the logits, so these need its merge's rescan to keep
// torch.topk's order; the other paths select on the final scores. The register paths (row,
// one-pass chunks) rank a few tied keys in shared memory (sixteenths) and fall back to warp
// lists when hundreds tie (integer logits, -1e9). Every path, and on the two-pass and one-pass
// paths several chunks a row, k > 8, greedy, forced EOS.
TYPED_TEST(BeamTopkCuda, RoundingTiesKeepIndexOrder) {
  const Case cases[] = {
      {64, 4, 8001, 8, true, masks(1, 0, false, false), 7},      // row path
      {2, 4, 58101, 8, true, masks(0, 2, true, false)},          // two-pass: several chunks a row
      {8, 16, 12000, 32, true, masks(0, 1, false, false), 3},    // one chunk a row, k > 8
      {3, 1, 32003, 1, true, masks(0, 6, false, false)},         // greedy
      {4, 3, 5000, 5, true, masks(0, 4999, false, true)},        // forced EOS
      {128, 4, 16411, 8, true, masks(0, 2, true, false)},        // one-pass: 3 chunks a row
      {264, 4, 16411, 8, true, masks(0, 1, false, false), 3},    // padded rows
      {32, 16, 16411, 32, true, masks(0, 1, false, false)},      // k > 8
      {512, 1, 16411, 1, true, masks(0, 6, false, false)},       // greedy
      {171, 3, 16411, 5, true, masks(0, 16410, false, true)},    // forced EOS
  };
  expect_every_path(cases);
  uint32_t seed = 4242;
  for (const Case& c : cases) {
    check<TypeParam>(c, seed += 17, {}, Ties{false, -1e9f});
    check<TypeParam>(c, seed += 17, {}, Ties{true, 0.f});
    check<TypeParam>(c, seed += 17, {}, Ties{false, 0.f, true});
  }
}

// The forced first token (kTopkForceToken, ForcedBOSTokenLogitsProcessor): each sentence's
// own token gets log-prob 0 and every other -inf, on every path (and k > 8, greedy); a forced
// EOS wins over it; a forced token other than EOS ends no hypothesis (next rows). Sentences
// without the bit in the same call decode as usual.
TYPED_TEST(BeamTopkCuda, PerSentenceForcedTokens) {
  const Case cases[] = {
      {64, 4, 8001, 8, true, masks(1, 0, false, false), 7},     // row path
      {3, 4, 58101, 8, true, masks(58100, 0, false, false)},    // two-pass, chunks
      {6, 16, 3001, 32, true, masks(3, 2, true, false)},        // two-pass, k > 8
      {9, 1, 32003, 1, false, masks(5, 6, false, false)},       // two-pass, greedy
      {130, 4, 16411, 8, true, masks(16410, 0, false, false)},  // one-pass
  };
  expect_every_path(cases);
  uint32_t seed = 1301;
  for (const Case& c : cases) {
    std::vector<unsigned char> flags(static_cast<size_t>(c.sentences));
    std::vector<int> forced(flags.size());
    for (size_t s = 0; s < flags.size(); ++s) {
      // forced token alone, with EOS masked, under a forced EOS too, none
      const unsigned char choices[] = {kTopkForceToken, kTopkForceToken | kTopkMaskEos,
                                       kTopkForceToken | kTopkForceEos, 0};
      flags[s] = choices[s % 4];
      forced[s] = int((s * 7919 + 13) % size_t(c.vocab));  // ids across the vocabulary
    }
    forced[0] = c.vocab - 1;  // the last id (a chunk's end)
    check<TypeParam>(c, seed += 13, flags, {}, forced);
  }
}

// Teacher forcing (kTopkTeacherForced, Score): the forced token keeps its real log-prob on
// every path, as the reference computes it; a forced EOS still wins with 0; sentences
// forced without the bit, or not forced, in the same call as usual.
TYPED_TEST(BeamTopkCuda, PerSentenceTeacherForcedTokens) {
  const Case cases[] = {
      {64, 4, 8001, 8, true, masks(1, 0, false, false), 7},     // row path
      {3, 4, 58101, 8, true, masks(58100, 0, false, false)},    // two-pass, chunks
      {9, 1, 32003, 1, false, masks(5, 6, false, false)},       // two-pass, greedy (Score's k)
      {130, 4, 16411, 8, true, masks(16410, 0, false, false)},  // one-pass
  };
  expect_every_path(cases);
  uint32_t seed = 1709;
  for (const Case& c : cases) {
    std::vector<unsigned char> flags(static_cast<size_t>(c.sentences));
    std::vector<int> forced(flags.size());
    for (size_t s = 0; s < flags.size(); ++s) {
      const unsigned char choices[] = {kTopkForceToken | kTopkTeacherForced,
                                       kTopkForceToken | kTopkTeacherForced | kTopkMaskEos,
                                       kTopkForceToken | kTopkTeacherForced | kTopkForceEos, kTopkForceToken, 0};
      flags[s] = choices[s % 5];
      forced[s] = int((s * 7919 + 13) % size_t(c.vocab));
    }
    forced[0] = c.vocab - 1;
    check<TypeParam>(c, seed += 13, flags, {}, forced);
  }
}

TEST(BeamTopkCudaArgs, RejectsBadK) {
  NMT_SKIP_WITHOUT_GPU();
  EXPECT_THROW(beam_topk_cuda<float>(nullptr, nullptr, nullptr, 1, 4, 100, 33, TopkMasks{},
                                     nullptr, nullptr, nullptr, 0, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(BeamTopkCuda)
#endif
