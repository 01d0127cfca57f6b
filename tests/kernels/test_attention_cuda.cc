// attention_cuda / attention_scores_cuda against attention_cpu / attention_scores_cpu on every
// path (decoder step, tiled, cuBLAS) with strided (fused-projection) layouts, shared K/V per
// beam group, key lengths and causal masks; the fused q/v biases with a kv_index table; and
// decoder_self_attention_cuda (KV append + key-row table, one step or per-row positions and
// cache rows) against decoder_self_attention_cpu.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include <algorithm>
#include <tuple>

#include "kernels/attention.h"

namespace nmt::kernels::test {
namespace {

template <typename T>
using AttentionCuda = CudaKernelTest<T>;
TYPED_TEST_SUITE(AttentionCuda, KernelElementTypes);

struct Shape {
  int64_t sentences, beam;  // batch = sentences * beam; K/V per sentence when share_kv
  int heads, head_dim;
  int64_t m, n;
  bool share_kv, lengths, causal;
  int64_t causal_offset;
};

std::string describe(const Shape& s) {
  return "b=" + std::to_string(s.sentences * s.beam) + " h=" + std::to_string(s.heads) +
         " d=" + std::to_string(s.head_dim) + " M=" + std::to_string(s.m) +
         " N=" + std::to_string(s.n) + (s.share_kv ? " shared-kv" : "") +
         (s.lengths ? " lengths" : "") + (s.causal ? " causal" : "");
}

// fused: q_bias, v_bias, a random kv_index table and kv_starts (the kv batches' rows at
// shuffled places of the buffer, as the decode state's pool holds each slot's tokens): the
// engine's encoder and cross-attention.
// settled: K/V marked as written launches ago (the step kernel stages its first keys before
// waiting; grids of up to one wave, and two warps a task where that doubled grid is one wave
// too: on a GPU of 132 SMs the 512-task shapes hold their keys with one warp a task, the
// smaller ones split, so every way is checked).
template <typename T>
void check(const Shape& s, AttentionPath path, uint32_t seed, bool fused = false, bool settled = false) {
  const int64_t batch = s.sentences * s.beam;
  const int64_t kv_batches = s.share_kv ? s.sentences : batch;
  const int64_t hd = int64_t(s.heads) * s.head_dim;
  // Q lives in a fused QKV projection output [batch, M, 3 * hd]; K and V in one [kvb, N, 2 * hd]
  // buffer (V at offset hd); the output rows carry 8 spare elements that must stay untouched.
  auto qbuf = random_vector(size_t(batch * s.m * 3 * hd), -1.f, 1.f, seed);
  auto kvbuf = random_vector(size_t(kv_batches * s.n * 2 * hd), -1.f, 1.f, seed + 1);
  round_to<T>(qbuf);
  round_to<T>(kvbuf);
  std::vector<int> lengths;
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < kv_batches; ++i)
    lengths.push_back(i == 0 ? int(s.n) : 1 + int(gen() % s.n));
  const int64_t out_row = hd + 8;
  std::vector<float> ref(size_t(batch * s.m * out_row), std::nanf(""));

  AttentionArgs<float> c;
  c.q = qbuf.data();
  c.k = kvbuf.data();
  c.v = kvbuf.data() + hd;
  c.out = ref.data();
  c.batch = batch;
  c.heads = s.heads;
  c.head_dim = s.head_dim;
  c.q_len = s.m;
  c.kv_len = s.n;
  c.queries_per_kv = s.share_kv ? s.beam : 1;
  c.q_batch_stride = s.m * 3 * hd;
  c.q_row_stride = 3 * hd;
  c.kv_batch_stride = s.n * 2 * hd;
  c.kv_row_stride = 2 * hd;
  c.out_batch_stride = s.m * out_row;
  c.out_row_stride = out_row;
  c.scale = 1.f / std::sqrt(float(s.head_dim));
  c.key_lengths = s.lengths ? lengths.data() : nullptr;
  c.causal = s.causal;
  c.causal_offset = s.causal_offset;
  auto q_bias = random_vector(size_t(hd), -1.f, 1.f, seed + 2);
  auto v_bias = random_vector(size_t(hd), -1.f, 1.f, seed + 3);
  round_to<T>(q_bias);
  round_to<T>(v_bias);
  std::vector<int> kv_index(static_cast<size_t>(batch)), kv_starts(static_cast<size_t>(kv_batches));
  for (auto& i : kv_index) i = int(gen() % kv_batches);
  for (size_t i = 0; i < kv_starts.size(); ++i) kv_starts[i] = int(i);
  std::shuffle(kv_starts.begin(), kv_starts.end(), gen);
  for (auto& st : kv_starts) st *= int(s.n);
  if (fused) {
    c.q_bias = q_bias.data();
    c.v_bias = v_bias.data();
    c.kv_index = kv_index.data();
    c.kv_starts = kv_starts.data();
  }
  attention_cpu(c);
  std::vector<float> ref_scores(size_t(batch * s.heads * s.m * s.n));
  if (!fused) attention_scores_cpu(c, ref_scores.data());

  DeviceBuffer<T> dq(qbuf), dkv(kvbuf), dout(ref.size()), dscores(ref_scores.size());
  DeviceBuffer<T> dqb(q_bias), dvb(v_bias);
  DeviceInts dlen(lengths), dindex(kv_index), dstarts(kv_starts);
  AttentionArgs<T> a;
  a.q = dq.get();
  a.k = dkv.get();
  a.v = dkv.get() + hd;
  a.out = dout.get();
  a.batch = c.batch;
  a.heads = c.heads;
  a.head_dim = c.head_dim;
  a.q_len = c.q_len;
  a.kv_len = c.kv_len;
  a.queries_per_kv = c.queries_per_kv;
  a.q_batch_stride = c.q_batch_stride;
  a.q_row_stride = c.q_row_stride;
  a.kv_batch_stride = c.kv_batch_stride;
  a.kv_row_stride = c.kv_row_stride;
  a.out_batch_stride = c.out_batch_stride;
  a.out_row_stride = c.out_row_stride;
  a.scale = c.scale;
  a.key_lengths = s.lengths ? dlen.get() : nullptr;
  a.causal = c.causal;
  a.causal_offset = c.causal_offset;
  a.path = path;
  a.kv_settled = settled;
  const char* path_name[] = {"auto", "step", "tiled", "cublas"};
  const std::string what = std::string(type_name<T>()) + " " + path_name[int(path)] + " " +
                           describe(s) + (fused ? " biases+kv_index" : "") + (settled ? " settled" : "");
  if (fused) {
    a.q_bias = dqb.get();
    a.v_bias = dvb.get();
    a.kv_index = dindex.get();
    a.kv_starts = dstarts.get();
    if (s.head_dim < 4 || s.head_dim > 128 || (s.head_dim & (s.head_dim - 1)) != 0) {  // no step kernel
      EXPECT_THROW(attention_cuda<T>(a, nullptr), std::invalid_argument) << what;
      return;
    }
    EXPECT_EQ(attention_chosen_path(a), AttentionPath::kDecoderStep) << what;
    EXPECT_THROW(attention_scores_cuda<T>(a, dscores.get(), nullptr), std::invalid_argument);
  }
  attention_cuda<T>(a, nullptr);
  if (!fused) attention_scores_cuda<T>(a, dscores.get(), nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());

  // written elements against the reference; the spare ones must still hold the poison
  auto got = dout.download();
  std::vector<float> got_w, ref_w;
  for (size_t i = 0; i < got.size(); ++i) {
    if (int64_t(i) % out_row < hd) {
      got_w.push_back(got[i]);
      ref_w.push_back(ref[i]);
    } else {
      EXPECT_TRUE(std::isnan(got[i])) << what << ": wrote past the head merge at " << i;
    }
  }
  NMT_EXPECT_CLOSE(got_w, ref_w, tolerance<T>(), what);
  if (!fused) NMT_EXPECT_CLOSE(dscores.download(), ref_scores, tolerance<T>(), what + " scores");
}

const Shape kShapes[] = {
    // decoder step (M = 1): self-attention over the cache, cross-attention shared per beam
    {16, 4, 8, 64, 1, 17, false, false, false, 0},
    {3, 4, 8, 64, 1, 1, false, false, true, 0},
    {3, 4, 8, 64, 1, 40, true, true, false, 0},
    {2, 5, 4, 128, 1, 300, true, true, false, 0},
    {5, 1, 2, 32, 1, 9, false, false, true, 8},
    {2, 2, 3, 48, 1, 21, false, true, false, 0},  // head_dim without a step kernel
    {3, 4, 16, 8, 1, 23, false, false, false, 0},  // the small heads of tiny models
    {3, 4, 16, 4, 1, 23, false, true, false, 0},
    {3, 4, 16, 16, 1, 40, true, true, false, 0},
    // encoder self-attention, decoder prefill (causal), cross-attention with M > 1
    {7, 1, 8, 64, 17, 17, false, true, false, 0},
    {4, 1, 4, 64, 37, 37, false, false, true, 0},
    {3, 2, 8, 64, 5, 40, true, true, false, 0},
    {2, 1, 2, 128, 70, 70, false, true, false, 0},
    {3, 1, 3, 40, 9, 13, false, true, true, 2},
    {2, 1, 2, 64, 20, 700, false, true, false, 0},  // K/V too large for shared memory
};

TYPED_TEST(AttentionCuda, Auto) {
  uint32_t seed = 11;
  for (const Shape& s : kShapes) check<TypeParam>(s, AttentionPath::kAuto, seed += 7);
}

TYPED_TEST(AttentionCuda, DecoderStep) {
  uint32_t seed = 211;
  for (bool settled : {false, true})
    for (const Shape& s : kShapes)
      if (s.m == 1) check<TypeParam>(s, AttentionPath::kDecoderStep, seed += 7, false, settled);
}

TYPED_TEST(AttentionCuda, Tiled) {
  uint32_t seed = 411;
  for (const Shape& s : kShapes) check<TypeParam>(s, AttentionPath::kTiled, seed += 7);
}

TYPED_TEST(AttentionCuda, Cublas) {
  uint32_t seed = 611;
  for (const Shape& s : kShapes) check<TypeParam>(s, AttentionPath::kCublas, seed += 7);
}

TYPED_TEST(AttentionCuda, BiasesAndKvIndex) {
  uint32_t seed = 811;
  for (bool settled : {false, true})
    for (const Shape& s : kShapes) check<TypeParam>(s, AttentionPath::kAuto, seed += 7, true, settled);
}

// The caches after a decoder step: appended positions as the reference (exactly: a T rounding
// of the same float sum), the rest untouched (NaN stays NaN).
template <typename T>
void expect_caches(const DeviceBuffer<T>& dk, const DeviceBuffer<T>& dv,
                   const std::vector<float>& ref_k, const std::vector<float>& ref_v,
                   const std::string& what) {
  for (auto [got, want, name] : {std::tuple{dk.download(), ref_k, "K"},
                                 std::tuple{dv.download(), ref_v, "V"}}) {
    std::vector<float> g, w;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << what << ": " << name << " cache written at " << i;
      } else {
        g.push_back(got[i]);
        w.push_back(want[i]);
      }
    }
    NMT_EXPECT_CLOSE(g, w, tolerance<T>(), what + " " + name + " cache");
  }
}

struct CacheShape {
  int64_t rows;
  int heads, head_dim, capacity, step;
};

// One decode step at *step over caches whose earlier positions hold random keys/values in
// random cache rows (the key-row table), later positions NaN (never read, never written).
template <typename T>
void check_decoder_self_attention(const CacheShape& s, uint32_t seed, bool settled) {
  const int64_t d = int64_t(s.heads) * s.head_dim, plane = s.rows * s.capacity * d;
  auto qkv = random_vector(size_t(s.rows * 3 * d), -1.f, 1.f, seed);
  auto bias = random_vector(size_t(3 * d), -1.f, 1.f, seed + 1);
  auto kc = random_vector(size_t(plane), -1.f, 1.f, seed + 2);
  auto vc = random_vector(size_t(plane), -1.f, 1.f, seed + 3);
  for (auto* v : {&qkv, &bias, &kc, &vc}) round_to<T>(*v);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t j = s.step; j < s.capacity; ++j)
      for (int64_t c = 0; c < d; ++c)
        kc[size_t((r * s.capacity + j) * d + c)] = vc[size_t((r * s.capacity + j) * d + c)] =
            std::nanf("");
  // the dense cache's tokens (c * capacity + j): position j of a random cache row, and the
  // row's own at the step
  std::vector<int> key_rows(size_t(s.rows * s.capacity), -1);
  std::mt19937 gen(seed);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int j = 0; j < s.step; ++j) key_rows[size_t(r * s.capacity + j)] = int(gen() % s.rows) * s.capacity + j;
    key_rows[size_t(r * s.capacity + s.step)] = int(r * s.capacity + s.step);
  }
  std::vector<float> ref(size_t(s.rows * d)), ref_k = kc, ref_v = vc;
  DecoderSelfAttentionArgs<float> c;
  c.qkv = qkv.data(); c.bias = bias.data(); c.k_cache = ref_k.data(); c.v_cache = ref_v.data();
  c.key_rows = key_rows.data(); c.step = &s.step; c.out = ref.data();
  c.rows = s.rows; c.capacity = s.capacity; c.heads = s.heads; c.head_dim = s.head_dim;
  c.scale = 1.f / std::sqrt(float(s.head_dim));
  decoder_self_attention_cpu(c);

  DeviceBuffer<T> dqkv(qkv), dbias(bias), dk(kc), dv(vc), dout(ref.size());
  DeviceInts drows(key_rows), dstep(std::vector<int>{s.step});
  DecoderSelfAttentionArgs<T> a;
  a.qkv = dqkv.get(); a.bias = dbias.get(); a.k_cache = dk.get(); a.v_cache = dv.get();
  a.key_rows = drows.get(); a.step = dstep.get(); a.out = dout.get();
  a.rows = c.rows; a.capacity = c.capacity; a.heads = c.heads; a.head_dim = c.head_dim;
  a.scale = c.scale;
  a.history_settled = settled;
  decoder_self_attention_cuda(a, nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  const std::string what = std::string(type_name<T>()) + " rows=" + std::to_string(s.rows) +
                           " h=" + std::to_string(s.heads) + " d=" + std::to_string(s.head_dim) +
                           " step=" + std::to_string(s.step) + (settled ? " settled" : "");
  NMT_EXPECT_CLOSE(dout.download(), ref, tolerance<T>(), what);
  expect_caches<T>(dk, dv, ref_k, ref_v, what);
}

TYPED_TEST(AttentionCuda, DecoderSelfAttention) {
  const CacheShape shapes[] = {
      {256, 8, 64, 32, 0},  {256, 8, 64, 32, 17}, {7, 2, 128, 40, 39},
      {5, 4, 32, 9, 4},     {16, 8, 64, 512, 300}, {6, 16, 8, 30, 11}, {6, 16, 16, 30, 29},
      {6, 16, 4, 30, 17},
  };
  uint32_t seed = 1011;
  for (bool settled : {false, true})
    for (const CacheShape& s : shapes) check_decoder_self_attention<TypeParam>(s, seed += 5, settled);
}

// Step-level batching: every row at its own position, writing its own cache row out of a larger
// cache (cache row != row), no common step. A cache row's positions from its row's position on
// are NaN (not written yet); the table points only at positions that are written.
template <typename T>
void check_decoder_self_attention_per_row(const CacheShape& s, uint32_t seed, bool settled) {
  const int64_t d = int64_t(s.heads) * s.head_dim, cache_rows_n = s.rows + 3;
  const int64_t plane = cache_rows_n * s.capacity * d;
  auto qkv = random_vector(size_t(s.rows * 3 * d), -1.f, 1.f, seed);
  auto bias = random_vector(size_t(3 * d), -1.f, 1.f, seed + 1);
  auto kc = random_vector(size_t(plane), -1.f, 1.f, seed + 2);
  auto vc = random_vector(size_t(plane), -1.f, 1.f, seed + 3);
  for (auto* v : {&qkv, &bias, &kc, &vc}) round_to<T>(*v);
  std::mt19937 gen(seed);
  std::vector<int> order(static_cast<size_t>(cache_rows_n));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::shuffle(order.begin(), order.end(), gen);
  std::vector<int> cache_rows(order.begin(), order.begin() + s.rows), positions;
  // position written up to (exclusive) per cache row: unowned rows are full
  std::vector<int> written(static_cast<size_t>(cache_rows_n), s.capacity);
  for (int64_t r = 0; r < s.rows; ++r) {
    const int t = r == 0 ? 0 : r == 1 ? s.capacity - 1 : int(gen() % s.capacity);
    positions.push_back(t);
    written[size_t(cache_rows[size_t(r)])] = t;
    for (int64_t j = t; j < s.capacity; ++j)
      for (int64_t c = 0; c < d; ++c) {
        const size_t at = size_t((cache_rows[size_t(r)] * s.capacity + j) * d + c);
        kc[at] = vc[at] = std::nanf("");
      }
  }
  std::vector<int> key_rows(size_t(cache_rows_n * s.capacity), -1);
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t own = cache_rows[size_t(r)], t = positions[size_t(r)];
    for (int j = 0; j < t; ++j) {
      int from;
      do from = int(gen() % cache_rows_n); while (written[size_t(from)] <= j);
      key_rows[size_t(own * s.capacity + j)] = from * s.capacity + j;  // the dense cache's token
    }
    key_rows[size_t(own * s.capacity + t)] = int(own * s.capacity + t);
  }
  std::vector<float> ref(size_t(s.rows * d)), ref_k = kc, ref_v = vc;
  DecoderSelfAttentionArgs<float> c;
  c.qkv = qkv.data(); c.bias = bias.data(); c.k_cache = ref_k.data(); c.v_cache = ref_v.data();
  c.key_rows = key_rows.data(); c.positions = positions.data(); c.cache_rows = cache_rows.data();
  c.out = ref.data();
  c.rows = s.rows; c.capacity = s.capacity; c.heads = s.heads; c.head_dim = s.head_dim;
  c.scale = 1.f / std::sqrt(float(s.head_dim));
  decoder_self_attention_cpu(c);

  DeviceBuffer<T> dqkv(qkv), dbias(bias), dk(kc), dv(vc), dout(ref.size());
  DeviceInts drows(key_rows), dpositions(positions), dcache_rows(cache_rows);
  DecoderSelfAttentionArgs<T> a;
  a.qkv = dqkv.get(); a.bias = dbias.get(); a.k_cache = dk.get(); a.v_cache = dv.get();
  a.key_rows = drows.get(); a.positions = dpositions.get(); a.cache_rows = dcache_rows.get();
  a.out = dout.get();
  a.rows = c.rows; a.capacity = c.capacity; a.heads = c.heads; a.head_dim = c.head_dim;
  a.scale = c.scale;
  a.history_settled = settled;
  decoder_self_attention_cuda(a, nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  const std::string what = std::string(type_name<T>()) + " per-row rows=" +
                           std::to_string(s.rows) + " h=" + std::to_string(s.heads) +
                           " d=" + std::to_string(s.head_dim) +
                           " capacity=" + std::to_string(s.capacity) + (settled ? " settled" : "");
  NMT_EXPECT_CLOSE(dout.download(), ref, tolerance<T>(), what);
  expect_caches<T>(dk, dv, ref_k, ref_v, what);
}

TYPED_TEST(AttentionCuda, DecoderSelfAttentionPerRow) {
  const CacheShape shapes[] = {
      {64, 8, 64, 32, 0}, {7, 2, 128, 40, 0}, {5, 4, 32, 9, 0}, {16, 8, 64, 512, 0}, {6, 16, 8, 30, 0}, {6, 16, 4, 30, 0},
  };
  uint32_t seed = 1211;
  for (bool settled : {false, true})
    for (const CacheShape& s : shapes) check_decoder_self_attention_per_row<TypeParam>(s, seed += 5, settled);
}

TEST(AttentionCudaArgs, DecoderSelfAttentionRejectsHeadDim) {
  NMT_SKIP_WITHOUT_GPU();
  DecoderSelfAttentionArgs<float> a;
  a.rows = 1; a.heads = 1; a.head_dim = 48; a.capacity = 4;
  EXPECT_THROW(decoder_self_attention_cuda(a, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(AttentionCuda)
#endif
