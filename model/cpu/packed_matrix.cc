#include "model/cpu/packed_matrix.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <mutex>
#include <optional>

namespace nmt::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The element types of a matmul: float32 throughout, or int8 operands into int32.
struct Types {
  Type src, weights, dst;
};
constexpr Types kFloat32{Type::f32, Type::f32, Type::f32};
constexpr Types kInt8{Type::s8, Type::s8, Type::s32};

// The matmul of m rows against weights in whatever layout it prefers (format "any"), with or
// without a (float32) bias.
dnnl::matmul::primitive_desc matmul_desc(int64_t m, int64_t n, int64_t k, bool bias, Types t) {
  const memory::desc src({m, k}, t.src, Tag::ab), weights({k, n}, t.weights, Tag::any),
      dst({m, n}, t.dst, Tag::ab);
  if (!bias) return {dnnl::matmul::desc(src, weights, dst), cpu_engine()};
  const memory::desc b({1, n}, Type::f32, Tag::ab);
  return {dnnl::matmul::desc(src, weights, b, dst), cpu_engine()};
}

}  // namespace

struct PackedMatrix::Impl {
  int64_t n = 0, k = 0;
  Types types{};
  memory packed;
  // The last primitive used (per bias or not): a decode step runs every layer at the same
  // rows, so the same matmul comes back until sentences leave; other row counts are
  // rebuilt, a lookup in oneDNN's primitive cache.
  mutable std::mutex mu;
  struct Cached {
    int64_t m = -1;
    std::optional<dnnl::matmul> prim;
    bool fits = false;  // its weight layout is the packed one
  };
  mutable Cached last[2];

  // W [n, k] row-major of `t.weights` elements, reordered; null where no blocked layout.
  static std::shared_ptr<const PackedMatrix> make(const void* w, int64_t rows, int64_t cols, Types t) {
    try {
      // The layout oneDNN picks for a decode step's rows (it does not depend on the rows on
      // the CPUs checked; run() checks it per row count).
      const dnnl::matmul::primitive_desc pd = matmul_desc(128, rows, cols, false, t);
      if (pd.weights_desc().data.format_kind != dnnl_blocked) return nullptr;
      auto impl = std::make_unique<Impl>();
      impl->n = rows;
      impl->k = cols;
      impl->types = t;
      // W [n, k] row-major is the matmul's weights [k, n] in layout "ba".
      memory plain({{cols, rows}, t.weights, Tag::ba}, cpu_engine(), const_cast<void*>(w));
      impl->packed = memory(pd.weights_desc(), cpu_engine());
      dnnl::stream s(cpu_engine());
      dnnl::reorder(plain, impl->packed).execute(s, plain, impl->packed);
      s.wait();
      return std::shared_ptr<const PackedMatrix>(new PackedMatrix(std::move(impl)));
    } catch (const dnnl::error&) {
      return nullptr;  // no matmul for these weights here: the plain GEMM
    }
  }
};

PackedMatrix::PackedMatrix(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedMatrix::~PackedMatrix() = default;

std::shared_ptr<const PackedMatrix> PackedMatrix::pack(const float* w, int64_t rows, int64_t cols) {
  return Impl::make(w, rows, cols, kFloat32);
}

std::shared_ptr<const PackedMatrix> PackedMatrix::pack(const int8_t* w, int64_t rows, int64_t cols) {
  return Impl::make(w, rows, cols, kInt8);
}

bool PackedMatrix::linear(const float* x, int64_t m, const float* bias, float* y) const {
  return impl_->types.src == Type::f32 && run(x, m, bias, y);
}

bool PackedMatrix::product(const int8_t* x, int64_t m, int32_t* y) const {
  return impl_->types.src == Type::s8 && run(x, m, nullptr, y);
}

bool PackedMatrix::run(const void* x, int64_t m, const void* bias, void* y) const {
  const Impl& p = *impl_;
  std::unique_lock<std::mutex> lock(p.mu);
  Impl::Cached& c = p.last[bias ? 1 : 0];
  if (c.m != m) {
    const dnnl::matmul::primitive_desc pd = matmul_desc(m, p.n, p.k, bias != nullptr, p.types);
    c.fits = pd.weights_desc() == p.packed.get_desc();
    c.prim.emplace(pd);
    c.m = m;
  }
  if (!c.fits) return false;
  const dnnl::matmul prim = *c.prim;  // a handle: runs outside the lock
  lock.unlock();
  const dnnl::engine& e = cpu_engine();
  memory src({{m, p.k}, p.types.src, Tag::ab}, e, const_cast<void*>(x));
  memory dst({{m, p.n}, p.types.dst, Tag::ab}, e, y);
  thread_local dnnl::stream s(e);  // a stream per thread: made once
  if (bias) {
    memory b({{1, p.n}, Type::f32, Tag::ab}, e, const_cast<void*>(bias));
    prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.packed}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, dst}});
  } else {
    prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.packed}, {DNNL_ARG_DST, dst}});
  }
  s.wait();
  return true;
}

size_t PackedMatrix::bytes() const { return impl_->packed.get_desc().get_size(); }

}  // namespace nmt::cpu
