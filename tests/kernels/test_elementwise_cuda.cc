// Elementwise kernels (elementwise.h, activation.h) against their CPU references, with widths
// that take the 16-byte pack and widths that do not.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include <algorithm>

#include "kernels/activation.h"
#include "kernels/elementwise.h"

namespace nmt::kernels::test {
namespace {

template <typename T>
using ElementwiseCuda = CudaKernelTest<T>;
TYPED_TEST_SUITE(ElementwiseCuda, KernelElementTypes);

const int kCols[] = {1, 7, 8, 64, 509, 512, 2048, 4099};

std::string what(const char* op, const char* type, int64_t cols) {
  return std::string(op) + " " + type + " cols=" + std::to_string(cols);
}

TYPED_TEST(ElementwiseCuda, BiasActivation) {
  using T = TypeParam;
  uint32_t seed = 3;
  for (int cols : kCols) {
    for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kSwish}) {
      const int64_t rows = 13;
      auto x = random_vector(size_t(rows * cols), -3.f, 3.f, seed++);
      auto bias = random_vector(size_t(cols), -1.f, 1.f, seed++);
      round_to<T>(x);
      round_to<T>(bias);
      auto ref = x;
      bias_activation_cpu(ref.data(), bias.data(), rows, cols, act);
      DeviceBuffer<T> dx(x), db(bias);
      bias_activation_cuda<T>(dx.get(), db.get(), rows, cols, act, nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      NMT_EXPECT_CLOSE(dx.download(), ref, tolerance<T>(),
                       what("bias_activation", type_name<T>(), cols));
      ref = x;
      bias_activation_cpu(ref.data(), nullptr, rows, cols, act);
      dx.upload(x);
      bias_activation_cuda<T>(dx.get(), nullptr, rows, cols, act, nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      NMT_EXPECT_CLOSE(dx.download(), ref, tolerance<T>(),
                       what("activation (no bias)", type_name<T>(), cols));
    }
  }
}

TYPED_TEST(ElementwiseCuda, AddBias) {
  using T = TypeParam;
  uint32_t seed = 50;
  for (int cols : kCols) {
    const int64_t rows = 11;
    auto x = random_vector(size_t(rows * cols), -3.f, 3.f, seed++);
    auto bias = random_vector(size_t(cols), -1.f, 1.f, seed++);
    round_to<T>(x);
    round_to<T>(bias);
    auto ref = x;
    add_bias_cpu(ref.data(), bias.data(), rows, cols);
    DeviceBuffer<T> dx(x), db(bias);
    add_bias_cuda<T>(dx.get(), db.get(), rows, cols, nullptr);
    NMT_CHECK_CUDA(cudaDeviceSynchronize());
    NMT_EXPECT_CLOSE(dx.download(), ref, tolerance<T>(), what("add_bias", type_name<T>(), cols));
  }
}

TYPED_TEST(ElementwiseCuda, EmbedPositions) {
  using T = TypeParam;
  uint32_t seed = 80;
  for (int d : kCols) {
    const int64_t rows = 19, vocab = 57, max_pos = 23;
    auto emb = random_vector(size_t(vocab * d), -1.f, 1.f, seed++);
    auto pos = random_vector(size_t(max_pos * d), -1.f, 1.f, seed++);
    round_to<T>(emb);
    round_to<T>(pos);
    std::mt19937 gen(seed);
    std::vector<int> ids(rows), positions(rows);
    for (int64_t r = 0; r < rows; ++r) {
      ids[r] = int(gen() % vocab);
      positions[r] = int(gen() % max_pos);
    }
    const int step = int(gen() % max_pos);
    for (bool with_pos : {true, false}) {
      for (bool device_step : {false, true}) {  // positions[r], or *step for every row
        std::vector<float> ref(size_t(rows * d));
        embed_positions_cpu(ids.data(), emb.data(), with_pos ? pos.data() : nullptr,
                            positions.data(), ref.data(), rows, d, 22.627417f,
                            device_step ? &step : nullptr);
        DeviceBuffer<T> demb(emb), dpos(pos), dout(ref.size());
        DeviceInts dids(ids), dpositions(positions), dstep(std::vector<int>{step});
        embed_positions_cuda<T>(dids.get(), demb.get(), with_pos ? dpos.get() : nullptr,
                                dpositions.get(), dout.get(), rows, d, 22.627417f, nullptr,
                                device_step ? dstep.get() : nullptr);
        NMT_CHECK_CUDA(cudaDeviceSynchronize());
        NMT_EXPECT_CLOSE(dout.download(), ref, tolerance<T>(),
                         what(device_step ? "embed (device step)"
                              : with_pos  ? "embed+positions"
                                          : "embed",
                              type_name<T>(), d));
      }
    }
  }
}

// The key-row table of the beam reorder, carried from round to round. Step-level batching:
// each row at its own position, owning a cache row out of a larger table (a random subset,
// reshuffled every round), continuing a random cache row; every other round each row writes
// a token given to it (the decode state's blocks), else the dense cache's.
TEST(ElementwiseCudaInts, BeamReorderKeyRowsPerRow) {
  NMT_SKIP_WITHOUT_GPU();
  std::mt19937 gen(141);
  DeviceBuffer<float> emb(std::vector<float>(8 * 4, 1.f)), emb_out(size_t(256) * 8);
  RowEmbedding<float> e;  // the table is what is checked here (see BeamReorderAndEmbed)
  e.embeddings = emb.get(); e.out = emb_out.get(); e.d_model = 8;
  for (int rows : {1, 12, 77, 256}) {
    const int capacity = 37, cache_rows_n = rows + 5;
    std::vector<int> table(size_t(cache_rows_n) * capacity, -1), next(table.size(), -1);
    DeviceInts a(table), b(table);
    DeviceInts *cur = &a, *nxt = &b;
    std::vector<int> order(static_cast<size_t>(cache_rows_n));
    for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
    for (int round = 0; round < 20; ++round) {
      std::shuffle(order.begin(), order.end(), gen);
      std::vector<int> cache_rows(order.begin(), order.begin() + rows), parent, positions, tokens;
      for (int r = 0; r < rows; ++r) {
        parent.push_back(int(gen() % cache_rows_n));
        positions.push_back(r == 0 ? 0 : r == 1 ? capacity - 1 : int(gen() % capacity));
        tokens.push_back(int(gen() % 100000));
      }
      const bool given = round % 2 == 1;
      beam_reorder_key_rows_cpu(table.data(), next.data(), parent.data(), rows, capacity,
                                nullptr, positions.data(), cache_rows.data(), given ? tokens.data() : nullptr);
      DeviceInts dparent(parent), dpositions(positions), dcache_rows(cache_rows),
          dids(std::vector<int>(size_t(rows), 3)), dtokens(tokens);
      e.ids = dids.get();
      beam_reorder_and_embed_cuda<float>(cur->get(), nxt->get(), dparent.get(), rows, capacity,
                                         dpositions.get(), dcache_rows.get(), e, nullptr, {}, {},
                                         given ? dtokens.get() : nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      ASSERT_EQ(nxt->download(), next) << "rows=" << rows << " round=" << round;
      std::swap(table, next);
      std::swap(cur, nxt);
    }
  }
  // A decode step has per-row positions: without them the call is refused.
  DeviceInts dtable(std::vector<int>(37, 0)), dnew(std::vector<int>(37, 0)),
      dparent(std::vector<int>{0}), dids(std::vector<int>{3});
  e.ids = dids.get();
  EXPECT_THROW(beam_reorder_and_embed_cuda<float>(dtable.get(), dnew.get(), dparent.get(), 1, 37,
                                                  nullptr, nullptr, e, nullptr),
               std::invalid_argument);
}

// The decode step's first launch: the per-row reorder above and the embedding of each row at
// its position, exactly as the two separate kernels compute them (bit-equal).
TYPED_TEST(ElementwiseCuda, BeamReorderAndEmbed) {
  using T = TypeParam;
  std::mt19937 gen(142);
  uint32_t seed = 300;
  for (int d : kCols) {
    for (int rows : {1, 4, 12, 77, 256}) {
      const int capacity = 37, cache_rows_n = rows + 5, vocab = 57;
      auto emb = random_vector(size_t(vocab * d), -1.f, 1.f, seed++);
      auto pos = random_vector(size_t(capacity * d), -1.f, 1.f, seed++);
      std::vector<int> table(size_t(cache_rows_n) * capacity);
      std::vector<int> order(static_cast<size_t>(cache_rows_n));
      for (auto& v : table) v = int(gen() % cache_rows_n);
      for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
      std::shuffle(order.begin(), order.end(), gen);
      std::vector<int> cache_rows(order.begin(), order.begin() + rows), parent, positions, ids;
      for (int r = 0; r < rows; ++r) {
        parent.push_back(int(gen() % cache_rows_n));
        positions.push_back(r == 0 ? 0 : r == 1 ? capacity - 1 : int(gen() % capacity));
        ids.push_back(int(gen() % vocab));
      }
      for (bool with_pos : {true, false}) {
        std::vector<int> next(table.size(), -1);
        beam_reorder_key_rows_cpu(table.data(), next.data(), parent.data(), rows, capacity,
                                  nullptr, positions.data(), cache_rows.data());
        DeviceBuffer<T> demb(emb), dpos(pos), ref_out(size_t(rows) * d), out(size_t(rows) * d);
        DeviceInts dtable(table), dnext(std::vector<int>(table.size(), -1)), dparent(parent),
            dpositions(positions), dcache_rows(cache_rows), dids(ids);
        embed_positions_cuda<T>(dids.get(), demb.get(), with_pos ? dpos.get() : nullptr,
                                dpositions.get(), ref_out.get(), rows, d, 22.627417f, nullptr);
        RowEmbedding<T> e;
        e.ids = dids.get(); e.embeddings = demb.get(); e.out = out.get();
        e.positions_table = with_pos ? dpos.get() : nullptr; e.d_model = d; e.scale = 22.627417f;
        beam_reorder_and_embed_cuda<T>(dtable.get(), dnext.get(), dparent.get(), rows, capacity,
                                       dpositions.get(), dcache_rows.get(), e, nullptr);
        NMT_CHECK_CUDA(cudaDeviceSynchronize());
        const std::string at = what("reorder+embed", type_name<T>(), d) +
                               " rows=" + std::to_string(rows) + (with_pos ? "" : " no positions");
        EXPECT_EQ(dnext.download(), next) << at;
        NMT_EXPECT_CLOSE(out.download(), ref_out.download(), 0.f, at);
      }
      // RowEmbedding::zero_position_token (M2M-100's <pad>): the rows of that token (row 0's,
      // and any other that drew it) get no position term, the others theirs.
      {
        DeviceBuffer<T> demb(emb), dpos(pos), with(size_t(rows) * d), without(size_t(rows) * d),
            out(size_t(rows) * d);
        DeviceInts dtable(table), dnext(std::vector<int>(table.size(), -1)), dparent(parent),
            dpositions(positions), dcache_rows(cache_rows), dids(ids);
        embed_positions_cuda<T>(dids.get(), demb.get(), dpos.get(), dpositions.get(), with.get(), rows, d, 2.f,
                                nullptr);
        embed_positions_cuda<T>(dids.get(), demb.get(), nullptr, dpositions.get(), without.get(), rows, d, 2.f,
                                nullptr);
        RowEmbedding<T> e;
        e.ids = dids.get(); e.embeddings = demb.get(); e.out = out.get();
        e.positions_table = dpos.get(); e.d_model = d; e.scale = 2.f;
        e.zero_position_token = ids[0];
        beam_reorder_and_embed_cuda<T>(dtable.get(), dnext.get(), dparent.get(), rows, capacity,
                                       dpositions.get(), dcache_rows.get(), e, nullptr);
        NMT_CHECK_CUDA(cudaDeviceSynchronize());
        const std::vector<float> a = with.download(), b = without.download();
        std::vector<float> ref(a.size());
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < d; ++c) ref[size_t(r) * d + c] = (ids[size_t(r)] == ids[0] ? b : a)[size_t(r) * d + c];
        NMT_EXPECT_CLOSE(out.download(), ref, 0.f,
                         what("reorder+embed", type_name<T>(), d) + " rows=" + std::to_string(rows) +
                             " zero position token");
      }
    }
  }
}

// The decode step reads its upload where the host wrote it (pinned memory): the first launch
// takes its rows' parents, positions, cache rows and ids from there and copies the whole
// upload to device memory for the later kernels, byte for byte (an odd length too).
// The token and position tables (float32) that the tests of the step's first launch below
// embed from.
struct StepTables {
  static constexpr int d = 64, capacity = 37, vocab = 57;
  DeviceBuffer<float> emb, pos;
  explicit StepTables(uint32_t seed)
      : emb(random_vector(size_t(vocab * d), -1.f, 1.f, seed)),
        pos(random_vector(size_t(capacity * d), -1.f, 1.f, seed + 1)) {}
};

TEST(ElementwiseCudaInts, BeamReorderAndEmbedFromPinnedUpload) {
  NMT_SKIP_WITHOUT_GPU();
  std::mt19937 gen(143);
  constexpr int d = StepTables::d, capacity = StepTables::capacity, vocab = StepTables::vocab;
  StepTables tables(400);
  DeviceBuffer<float>&demb = tables.emb, &dpos = tables.pos;
  for (int rows : {1, 4, 12, 77, 256}) {
    const int cache_rows_n = rows + 5;
    std::vector<int> table(size_t(cache_rows_n) * capacity), parent, positions, cache_rows, ids;
    for (auto& v : table) v = int(gen() % cache_rows_n);
    for (int r = 0; r < rows; ++r) {
      parent.push_back(int(gen() % cache_rows_n));
      positions.push_back(r == 0 ? 0 : r == 1 ? capacity - 1 : int(gen() % capacity));
      cache_rows.push_back(r);  // distinct
      ids.push_back(int(gen() % vocab));
    }
    const size_t ints = 4 * size_t(rows), bytes = ints * sizeof(int) + 3;
    void* pinned = nullptr;
    NMT_CHECK_CUDA(cudaMallocHost(&pinned, bytes));
    int* h = static_cast<int*>(pinned);
    std::copy(parent.begin(), parent.end(), h);
    std::copy(positions.begin(), positions.end(), h + rows);
    std::copy(cache_rows.begin(), cache_rows.end(), h + 2 * rows);
    std::copy(ids.begin(), ids.end(), h + 3 * rows);
    for (size_t i = ints * sizeof(int); i < bytes; ++i) static_cast<unsigned char*>(pinned)[i] = 0xA0 + i % 7;
    std::vector<int> next(table.size(), -1);
    beam_reorder_key_rows_cpu(table.data(), next.data(), parent.data(), rows, capacity, nullptr,
                              positions.data(), cache_rows.data());
    DeviceInts dtable(table), dnext(std::vector<int>(table.size(), -1)), dpositions(positions), dids(ids);
    DeviceBuffer<float> ref_out(size_t(rows) * d), out(size_t(rows) * d);
    embed_positions_cuda<float>(dids.get(), demb.get(), dpos.get(), dpositions.get(), ref_out.get(), rows, d,
                                8.f, nullptr);
    void* copy = nullptr;
    NMT_CHECK_CUDA(cudaMalloc(&copy, bytes));
    NMT_CHECK_CUDA(cudaMemset(copy, 0, bytes));
    RowEmbedding<float> e;
    e.ids = h + 3 * rows; e.embeddings = demb.get(); e.positions_table = dpos.get(); e.out = out.get();
    e.d_model = d; e.scale = 8.f;
    beam_reorder_and_embed_cuda<float>(dtable.get(), dnext.get(), h, rows, capacity, h + rows, h + 2 * rows, e,
                                       nullptr, StepUploadCopy{pinned, copy, int64_t(bytes)});
    NMT_CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<unsigned char> copied(bytes);
    NMT_CHECK_CUDA(cudaMemcpy(copied.data(), copy, bytes, cudaMemcpyDeviceToHost));
    const std::string at = "rows=" + std::to_string(rows);
    EXPECT_EQ(dnext.download(), next) << at;
    NMT_EXPECT_CLOSE(out.download(), ref_out.download(), 0.f, at);
    EXPECT_EQ(copied, std::vector<unsigned char>(static_cast<unsigned char*>(pinned),
                                                 static_cast<unsigned char*>(pinned) + bytes))
        << at;
    cudaFree(copy);
    cudaFreeHost(pinned);
  }
}

// Rows that follow the step before (StepFollow): their token and parent come from its next rows,
// the others' from the upload, and every row's running score is written where the top-k
// reads it; the table and the embeddings as if the host had given those tokens and parents.
TEST(ElementwiseCudaInts, BeamReorderAndEmbedFollowingRows) {
  NMT_SKIP_WITHOUT_GPU();
  std::mt19937 gen(144);
  constexpr int d = StepTables::d, capacity = StepTables::capacity, vocab = StepTables::vocab;
  StepTables tables(500);
  DeviceBuffer<float>&demb = tables.emb, &dpos = tables.pos;
  for (int rows : {1, 4, 12, 77, 256}) {
    const int cache_rows_n = rows + 5, before_rows = rows + 3;
    std::vector<int> table(size_t(cache_rows_n) * capacity), parent, positions, cache_rows, ids, follow;
    for (auto& v : table) v = int(gen() % cache_rows_n);
    std::vector<int> before_tokens, before_parents;
    std::vector<float> before_running, running_in;
    for (int f = 0; f < before_rows; ++f) {
      before_tokens.push_back(int(gen() % vocab));
      before_parents.push_back(int(gen() % cache_rows_n));
      before_running.push_back(-float(gen() % 1000) / 7.f);
    }
    std::vector<int> eff_parent, eff_ids;
    std::vector<float> want_running;
    for (int r = 0; r < rows; ++r) {
      parent.push_back(int(gen() % cache_rows_n));
      positions.push_back(r == 0 ? 1 : r == 1 ? capacity - 1 : 1 + int(gen() % (capacity - 1)));
      cache_rows.push_back(r);
      ids.push_back(int(gen() % vocab));
      running_in.push_back(-float(gen() % 1000) / 3.f);
      follow.push_back(r % 3 == 1 ? -1 : int(gen() % before_rows));  // row 0 follows, row 1 not
      const int f = follow.back();
      eff_parent.push_back(f >= 0 ? before_parents[size_t(f)] : parent.back());
      eff_ids.push_back(f >= 0 ? before_tokens[size_t(f)] : ids.back());
      want_running.push_back(f >= 0 ? before_running[size_t(f)] : running_in.back());
    }
    std::vector<int> next(table.size(), -1);
    beam_reorder_key_rows_cpu(table.data(), next.data(), eff_parent.data(), rows, capacity, nullptr,
                              positions.data(), cache_rows.data());
    DeviceInts dtable(table), dnext(std::vector<int>(table.size(), -1)), dparent(parent), dpositions(positions),
        dcache_rows(cache_rows), dids(ids), deff_ids(eff_ids), dfollow(follow), dbefore_tokens(before_tokens),
        dbefore_parents(before_parents);
    DeviceBuffer<float> ref_out(size_t(rows) * d), out(size_t(rows) * d), dbefore_running(before_running),
        drunning_in(running_in), drunning_out(static_cast<size_t>(rows));
    embed_positions_cuda<float>(deff_ids.get(), demb.get(), dpos.get(), dpositions.get(), ref_out.get(), rows, d,
                                8.f, nullptr);
    RowEmbedding<float> e;
    e.ids = dids.get(); e.embeddings = demb.get(); e.positions_table = dpos.get(); e.out = out.get();
    e.d_model = d; e.scale = 8.f;
    StepFollow fol;
    fol.rows = dfollow.get();
    fol.tokens = dbefore_tokens.get(); fol.parents = dbefore_parents.get(); fol.running = dbefore_running.get();
    fol.running_in = drunning_in.get(); fol.running_out = drunning_out.get();
    beam_reorder_and_embed_cuda<float>(dtable.get(), dnext.get(), dparent.get(), rows, capacity, dpositions.get(),
                                       dcache_rows.get(), e, nullptr, {}, fol);
    NMT_CHECK_CUDA(cudaDeviceSynchronize());
    const std::string at = "rows=" + std::to_string(rows);
    EXPECT_EQ(dnext.download(), next) << at;
    NMT_EXPECT_CLOSE(out.download(), ref_out.download(), 0.f, at);
    EXPECT_EQ(drunning_out.download(), want_running) << at;
  }
  // Following rows without the step before's rows are refused.
  DeviceInts dtable(std::vector<int>(37, 0)), dnew(std::vector<int>(37, 0)), dparent(std::vector<int>{0}),
      dpositions(std::vector<int>{1}), dids(std::vector<int>{3}), dfollow(std::vector<int>{0});
  RowEmbedding<float> e;
  e.ids = dids.get(); e.embeddings = demb.get(); e.d_model = d;
  StepFollow fol;
  fol.rows = dfollow.get();
  EXPECT_THROW(beam_reorder_and_embed_cuda<float>(dtable.get(), dnew.get(), dparent.get(), 1, 37, dpositions.get(),
                                                  nullptr, e, nullptr, {}, fol),
               std::invalid_argument);
}

template <typename From, typename To>
void check_convert(int64_t n, uint32_t seed) {
  auto x = random_vector(size_t(n), -100.f, 100.f, seed);
  round_to<From>(x);
  auto ref = x;
  round_to<To>(ref);
  DeviceBuffer<From> dsrc(x);
  DeviceBuffer<To> ddst{size_t(n)};
  convert_cuda<From, To>(dsrc.get(), ddst.get(), n, nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  NMT_EXPECT_CLOSE(ddst.download(), ref, 0.f,
                   std::string("convert ") + type_name<From>() + "->" + type_name<To>() +
                       " n=" + std::to_string(n));
}

TEST(ElementwiseCudaConvert, AllPairs) {
  NMT_SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 7, 8, 4096, 100003}) {
    check_convert<float, __half>(n, 1);
    check_convert<__half, float>(n, 2);
    check_convert<float, __nv_bfloat16>(n, 3);
    check_convert<__nv_bfloat16, float>(n, 4);
    check_convert<__half, __nv_bfloat16>(n, 5);
    check_convert<__nv_bfloat16, __half>(n, 6);
  }
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(ElementwiseCuda)
#endif
