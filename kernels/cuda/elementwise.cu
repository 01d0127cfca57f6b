// Elementwise fusions (kernels/elementwise.h, kernels/activation.h). All are memory-bound:
// 16-byte packs where the row width and the pointers allow it, one element otherwise.
#include <stdexcept>
#include <type_traits>

#include "kernels/activation.h"
#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace nmt::kernels {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// Calls f(row, col) for every pack of N columns of a rows x cols grid (cols % N == 0).
template <int N, class F>
__global__ void __launch_bounds__(kThreads) for_each_pack(int64_t rows, int64_t cols, F f) {
  pdl_prologue();
  const int64_t packs_per_row = cols / N;
  const int64_t total = rows * packs_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row;
    f(row, (i - row * packs_per_row) * N);
  }
}

template <int N, class F>
void launch_packs(int64_t rows, int64_t cols, cudaStream_t stream, F f) {
  if (rows <= 0 || cols <= 0) return;
  launch(&for_each_pack<N, F>, grid_for(rows * (cols / N), kThreads, 8), kThreads, 0, stream, rows, cols, f);
}

// True when the 16-byte pack fits cols, every pointer and every row stride.
template <typename T>
bool full_pack(int64_t cols, std::initializer_list<const void*> ptrs,
               std::initializer_list<int64_t> strides = {}) {
  constexpr int kFull = 16 / int(sizeof(T));
  bool full = pick_pack<T>(cols, ptrs) == kFull;
  for (int64_t s : strides) full = full && s % kFull == 0;
  return full;
}

// Calls f(std::integral_constant<int, N>()) with N the full 16-byte pack of T when allowed
// (full_pack), else one element: the one place a launch picks its compile-time pack width.
template <typename T, class F>
void with_pack(bool full, F f) {
  if (full)
    f(std::integral_constant<int, 16 / int(sizeof(T))>());
  else
    f(std::integral_constant<int, 1>());
}

// Launches Op<T, N> over rows x cols with the pack with_pack picks.
template <typename T, template <typename, int> class Op, class... Args>
void launch_op(bool full, int64_t rows, int64_t cols, cudaStream_t stream, Args... args) {
  with_pack<T>(full, [&](auto pack) {
    constexpr int N = decltype(pack)::value;
    launch_packs<N>(rows, cols, stream, Op<T, N>{args...});
  });
}

template <typename T, int N>
struct BiasActivation {
  T* x;
  const T* bias;
  int64_t cols;
  Activation act;
  __device__ void operator()(int64_t r, int64_t c) const {
    float v[N], b[N];
    load_pack<T, N>(x + r * cols + c, v);
    if (bias) load_pack<T, N>(bias + c, b);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = activate(v[i] + (bias ? b[i] : 0.f), act);
    store_pack<T, N>(x + r * cols + c, v);
  }
};

template <typename T, int N>
struct AddBias {
  T* x;
  const T* bias;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c) const {
    float v[N], b[N];
    load_pack<T, N>(x + r * cols + c, v);
    load_pack<T, N>(bias + c, b);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += b[i];
    store_pack<T, N>(x + r * cols + c, v);
  }
};

template <typename T, int N>
struct EmbedPositions {
  const int* ids;
  const T* embeddings;
  const T* positions_table;
  const int* positions;
  T* out;
  int64_t d_model;
  float scale;
  const int* step;
  // Set: the table is int8 with per-row scales (kernels/quantize.h; embeddings unread).
  const int8_t* q = nullptr;
  const float* q_scale = nullptr;
  __device__ void operator()(int64_t r, int64_t c) const { embed(r, ids[r], c); }
  // Row r's embedding of token `id`, without the position term when not `positioned`.
  __device__ void embed(int64_t r, int id, int64_t c, bool positioned = true) const {
    float e[N], p[N];
    const bool add = positions_table && positioned;
    if (q) {
      const int8_t* row = q + int64_t(id) * d_model + c;
      const float s = q_scale[id];
#pragma unroll
      for (int i = 0; i < N; ++i) e[i] = float(row[i]) * s;
    } else {
      load_pack<T, N>(embeddings + int64_t(id) * d_model + c, e);
    }
    if (add) {
      const int64_t pos = step ? *step : positions[r];
      load_pack<T, N>(positions_table + pos * d_model + c, p);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = e[i] * scale + (add ? p[i] : 0.f);
    store_pack<T, N>(out + r * d_model + c, e);
  }
};

constexpr int kReorderThreads = 64;  // a row's threads

// Where a row of the step starts: its position, its cache row, the row whose key-row table it
// takes over, its token, the cache token its position's key/value go to.
struct RowStart {
  int t, c, from, token, write;
};

// Row r's start, read from the upload (parent, positions, cache_rows, ids may be pinned host
// memory) and, for a row that follows the step before, from that step's next rows; its
// running score goes to follow.running_out when `write_running`.
__device__ __forceinline__ RowStart row_start(int64_t r, const int* parent, const int* positions,
                                              const int* cache_rows, const int* tokens, const int* ids,
                                              const StepFollow& follow, bool write_running, int capacity) {
  const int t = positions[r];
  const int c = cache_rows ? cache_rows[r] : int(r);
  const int write = tokens ? tokens[r] : c * capacity + t;
  // The row's own entries and its follow index are read together, not one after the other:
  // in the pinned upload each read crosses PCIe, so a chain of two would lengthen the step.
  const int f = follow.rows ? follow.rows[r] : -1;
  const int host_parent = parent[r], host_token = ids[r];
  const float host_running = follow.running_out ? follow.running_in[r] : 0.f;
  asm volatile("" : : "r"(host_parent), "r"(host_token), "f"(host_running), "r"(write));  // loaded here, before f is known
  int from = host_parent, token = host_token;
  float running = host_running;
  if (f >= 0) {
    from = follow.parents[f];
    token = follow.tokens[f];
    running = follow.running[f];
  }
  if (follow.running_out && write_running) follow.running_out[r] = running;
  return {t, c, from, token, write};
}

// kRows rows a block, kReorderThreads threads each: its share of the step's upload when there
// is one (elementwise.h), then for each row its token, parent and running score (the step
// before's when it follows), its new key-row table (see beam_reorder_key_rows_cpu) and its
// embedding (EmbedPositions' arithmetic, as embed_positions_cuda). With several rows a block,
// the block's first threads read its rows' entries side by side, so that a warp's reads of the
// pinned upload share its PCIe requests: one block a row made a request of each row's entry,
// and at 1,024 rows the launch took 21.6 us for a few kilobytes (end-to-end run 45).
// kPadZero: a row whose token is zero_token gets no position term (RowEmbedding::
// zero_position_token); a compile-time choice, so that the other models' kernel stays as it is.
template <typename T, int N, int kRows, bool kPadZero>
__global__ void __launch_bounds__(kRows * kReorderThreads)
    reorder_embed_kernel(const int* old_rows, int* new_rows, const int* parent, int64_t rows, int capacity,
                         const int* positions, const int* cache_rows, const int* tokens,
                         EmbedPositions<T, N> embed, StepUploadCopy upload, StepFollow follow, int zero_token) {
  pdl_prologue();
  if (upload.bytes > 0) {  // this block's share of the upload, for the later kernels
    const int64_t share = (upload.bytes + gridDim.x - 1) / gridDim.x;
    const int64_t end = min(upload.bytes, (int64_t(blockIdx.x) + 1) * share);
    const auto* src = static_cast<const unsigned char*>(upload.src);
    auto* dst = static_cast<unsigned char*>(upload.dst);
    for (int64_t i = blockIdx.x * share + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
  }
  const int slot = int(threadIdx.x) / kReorderThreads, lane = int(threadIdx.x) % kReorderThreads;
  const int64_t r = int64_t(blockIdx.x) * kRows + slot;
  RowStart start;
  if constexpr (kRows == 1) {
    start = row_start(r, parent, positions, cache_rows, tokens, embed.ids, follow, lane == 0, capacity);
  } else {
    __shared__ RowStart starts[kRows];
    const int64_t own = int64_t(blockIdx.x) * kRows + threadIdx.x;
    if (threadIdx.x < kRows && own < rows)
      starts[threadIdx.x] = row_start(own, parent, positions, cache_rows, tokens, embed.ids, follow, true, capacity);
    __syncthreads();
    if (r >= rows) return;
    start = starts[slot];
  }
  const int* src = old_rows + int64_t(start.from) * capacity;
  int* dst = new_rows + int64_t(start.c) * capacity;
  for (int j = lane; j <= start.t; j += kReorderThreads) dst[j] = j < start.t ? src[j] : start.write;
  const bool positioned = !kPadZero || start.token != zero_token;
  for (int64_t col = int64_t(lane) * N; col < embed.d_model; col += int64_t(kReorderThreads) * N)
    embed.embed(r, start.token, col, positioned);
}

template <typename From, typename To, int N>
struct Convert {
  const From* src;
  To* dst;
  __device__ void operator()(int64_t, int64_t c) const {
    float v[N];
    load_pack<From, N>(src + c, v);
    store_pack<To, N>(dst + c, v);
  }
};

}  // namespace
}  // namespace cuda

template <typename T>
void bias_activation_cuda(T* x, const T* bias, int64_t rows, int64_t cols, Activation act,
                          cudaStream_t stream) {
  using namespace cuda;
  launch_op<T, BiasActivation>(full_pack<T>(cols, {x, bias}), rows, cols, stream, x, bias, cols,
                               act);
}

template <typename T>
void add_bias_cuda(T* x, const T* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  using namespace cuda;
  launch_op<T, AddBias>(full_pack<T>(cols, {x, bias}), rows, cols, stream, x, bias, cols);
}

template <typename T>
void embed_positions_cuda(const int* ids, const T* embeddings, const T* positions_table,
                          const int* positions, T* out, int64_t rows, int d_model, float scale,
                          cudaStream_t stream, const int* step, const int8_t* q, const float* q_scale) {
  using namespace cuda;
  launch_op<T, EmbedPositions>(full_pack<T>(d_model, {embeddings, positions_table, out, q}), rows,
                               d_model, stream, ids, embeddings, positions_table, positions, out,
                               int64_t(d_model), scale, step, q, q_scale);
}

template <typename T>
void beam_reorder_and_embed_cuda(const int* old_rows, int* new_rows, const int* parent,
                                 int64_t rows, int capacity, const int* positions,
                                 const int* cache_rows, const RowEmbedding<T>& e,
                                 cudaStream_t stream, StepUploadCopy upload, StepFollow follow,
                                 const int* tokens) {
  using namespace cuda;
  if (!positions) throw std::invalid_argument("beam_reorder_and_embed_cuda: positions is null");
  if (follow.rows && (!follow.tokens || !follow.parents || !follow.running))
    throw std::invalid_argument("beam_reorder_and_embed_cuda: following rows need the step before's rows");
  if (follow.running_out && !follow.running_in)
    throw std::invalid_argument("beam_reorder_and_embed_cuda: running scores out need them in");
  if (rows <= 0) return;
  // A block a row while a step has few (its latency then is one row's); past that a block of
  // kReorderRowsABlock rows (reorder_embed_kernel says why).
  constexpr int64_t kFewRows = 32;
  constexpr int kReorderRowsABlock = 8;
  with_pack<T>(full_pack<T>(e.d_model, {e.embeddings, e.positions_table, e.out, e.q}), [&](auto pack) {
    constexpr int N = decltype(pack)::value;
    const EmbedPositions<T, N> embed{e.ids,   e.embeddings,        e.positions_table, positions, e.out,
                                     int64_t(e.d_model), e.scale, nullptr, e.q, e.q_scale};
    const auto go = [&](auto pad_zero) {
      constexpr bool kPadZero = decltype(pad_zero)::value;
      if (rows <= kFewRows) {
        launch(&reorder_embed_kernel<T, N, 1, kPadZero>, unsigned(rows), kReorderThreads, 0, stream, old_rows,
               new_rows, parent, rows, capacity, positions, cache_rows, tokens, embed, upload, follow,
               e.zero_position_token);
      } else {
        launch(&reorder_embed_kernel<T, N, kReorderRowsABlock, kPadZero>,
               unsigned((rows + kReorderRowsABlock - 1) / kReorderRowsABlock), kReorderRowsABlock * kReorderThreads,
               0, stream, old_rows, new_rows, parent, rows, capacity, positions, cache_rows, tokens, embed, upload,
               follow, e.zero_position_token);
      }
    };
    if (e.zero_position_token >= 0 && e.positions_table) go(std::true_type());
    else go(std::false_type());
  });
}

template <typename From, typename To>
void convert_cuda(const From* src, To* dst, int64_t n, cudaStream_t stream) {
  using namespace cuda;
  constexpr int kPack = 8;  // 16 bytes of the 16-bit side, 32 of float
  const bool full = n % kPack == 0 &&
                    reinterpret_cast<uintptr_t>(src) % (kPack * sizeof(From)) == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % (kPack * sizeof(To)) == 0;
  if (full)
    launch_packs<kPack>(1, n, stream, Convert<From, To, kPack>{src, dst});
  else
    launch_packs<1>(1, n, stream, Convert<From, To, 1>{src, dst});
}

#define NMT_INSTANTIATE(T)                                                                     \
  template void bias_activation_cuda<T>(T*, const T*, int64_t, int64_t, Activation,           \
                                        cudaStream_t);                                         \
  template void add_bias_cuda<T>(T*, const T*, int64_t, int64_t, cudaStream_t);               \
  template void embed_positions_cuda<T>(const int*, const T*, const T*, const int*, T*,       \
                                        int64_t, int, float, cudaStream_t, const int*,      \
                                        const int8_t*, const float*);                       \
  template void beam_reorder_and_embed_cuda<T>(const int*, int*, const int*, int64_t, int,     \
                                               const int*, const int*, const RowEmbedding<T>&, \
                                               cudaStream_t, StepUploadCopy, StepFollow, const int*);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
NMT_INSTANTIATE(__nv_bfloat16)
#undef NMT_INSTANTIATE

#define NMT_INSTANTIATE_CONVERT(A, B)                                                          \
  template void convert_cuda<A, B>(const A*, B*, int64_t, cudaStream_t);                      \
  template void convert_cuda<B, A>(const B*, A*, int64_t, cudaStream_t);
NMT_INSTANTIATE_CONVERT(float, __half)
NMT_INSTANTIATE_CONVERT(float, __nv_bfloat16)
NMT_INSTANTIATE_CONVERT(__half, __nv_bfloat16)
#undef NMT_INSTANTIATE_CONVERT

}  // namespace nmt::kernels
