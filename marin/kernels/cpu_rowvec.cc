// The CPU row-vector kernels of `marin.kernels.cpu_rowvec` (nbs/22b_cpu_rowvec.ipynb says why and how): an XLA FFI
// library compiled on first use with the machine's C++ compiler. This text is part of the build cache's key, so an
// edit here builds a new library.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;

// Vectors of kLanes floats (GCC/Clang vector extensions; AVX-512, AVX2, or what the compiler makes of 4 lanes),
// a tile of kTile = 4 vectors of output columns, and up to kRowGroup rows of x per pass over a tile: kRowGroup x 4
// accumulators stay in registers (AVX-512 has 32, AVX2 16).
#if defined(__AVX512F__)
constexpr int kLanes = 16, kRowGroup = 4;
#elif defined(__AVX2__)
constexpr int kLanes = 8, kRowGroup = 2;
#else
constexpr int kLanes = 4, kRowGroup = 2;
#endif
constexpr int kTile = 4 * kLanes;
constexpr int64_t kPrefetchRows = 16;  // a weight row this far ahead is prefetched: a tile's rows are F apart
// The D loop runs in bands of kBlockSteps weight rows, each band across all of a chunk's tiles (the accumulators go
// to Y between bands): a band reads kBlockSteps rows left to right, streams the hardware prefetcher follows, where
// one tile's whole column (64 bytes of int8 per row, rows F apart) defeats it. 1.5-2x at one row for int8.
constexpr int64_t kBlockSteps = 16;
typedef float vf __attribute__((vector_size(4 * kLanes)));
typedef int32_t vi __attribute__((vector_size(4 * kLanes)));

static inline vf LoadF(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
static inline void StoreF(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

// kLanes signed bytes, sign-extended to int32 lanes.
static inline vi Widen(const void* p) {
#if defined(__AVX512F__)
  return (vi)_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p));
#elif defined(__AVX2__)
  return (vi)_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p));
#else
  vi v;
  for (int i = 0; i < kLanes; ++i) v[i] = static_cast<const int8_t*>(p)[i];
  return v;
#endif
}
static inline vf ToFloat(vi v) { return __builtin_convertvector(v, vf); }

// body(c) for every chunk c in [0, n). The caller and n - 1 tasks on XLA's pool claim chunks from one counter, so
// a pool that is busy with other products (or has one thread) only means the caller runs more chunks itself; it
// waits just for chunks already running elsewhere. A task that starts after the last claim touches nothing but
// the counter it shares.
template <typename Body>
static void RunChunks(ffi::ThreadPool& pool, int64_t n, const Body& body) {
  struct Counter { std::atomic<int64_t> next{0}, done{0}; };
  auto st = std::make_shared<Counter>();
  const Body* b = &body;
  auto work = [st, n, b]() {
    for (int64_t c; (c = st->next.fetch_add(1)) < n; st->done.fetch_add(1)) (*b)(c);
  };
  for (int64_t t = 1; t < n; ++t) pool.Schedule(decltype(work)(work));  // each task owns a copy
  work();
  while (st->done.load() < n) std::this_thread::yield();
}

// Y[r, f : f + CV * kLanes] for the RT rows of X: the sum over the D input rows d of X[r, d] * W[d, f : ...], times
// post[f : ...] when given. load(s, f, w) widens the weights of step s into w[K][CV] (K input rows per step: the two
// nibbles of an int4 byte row). The RT x CV accumulators stay in registers for the whole pass over D, so each
// widened weight vector is used for every row of X.
template <int RT, int CV, int K, typename Load>
static void Tile(const float* __restrict X, int64_t D, int64_t F, int64_t f, int64_t s0, int64_t s1,
                 const Load& load, const float* __restrict post, float* __restrict Y) {
  vf acc[RT][CV];
  for (int r = 0; r < RT; ++r)
    for (int c = 0; c < CV; ++c) acc[r][c] = s0 == 0 ? vf{} : LoadF(Y + r * F + f + c * kLanes);
  for (int64_t s = s0; s < s1; ++s) {
    vf w[K][CV];
    load(s, f, w);
    for (int k = 0; k < K; ++k)
      for (int r = 0; r < RT; ++r) {
        const float xv = X[r * D + s * K + k];
        for (int c = 0; c < CV; ++c) acc[r][c] += xv * w[k][c];
      }
  }
  const bool last = s1 == D / K;
  for (int r = 0; r < RT; ++r)
    for (int c = 0; c < CV; ++c)
      StoreF(Y + r * F + f + c * kLanes, post && last ? acc[r][c] * LoadF(post + f + c * kLanes) : acc[r][c]);
}

// Every row of X [R, D] through one tile, kRowGroup rows per pass (the weights are in cache for the second pass).
template <int CV, int K, typename Load>
static void TileAllRows(const float* X, int64_t R, int64_t D, int64_t F, int64_t f, int64_t s0, int64_t s1,
                        const Load& load, const float* post, float* Y) {
  int64_t r = 0;
  for (; r + kRowGroup <= R; r += kRowGroup) Tile<kRowGroup, CV, K>(X + r * D, D, F, f, s0, s1, load, post, Y + r * F);
  switch (R - r) {
    case 3: Tile<3, CV, K>(X + r * D, D, F, f, s0, s1, load, post, Y + r * F); break;
    case 2: Tile<2, CV, K>(X + r * D, D, F, f, s0, s1, load, post, Y + r * F); break;
    case 1: Tile<1, CV, K>(X + r * D, D, F, f, s0, s1, load, post, Y + r * F); break;
  }
}

// Y[R, F] = X[R, D] @ W (times post), split over XLA's intra-op threads by runs of whole tiles of columns, so no
// chunk's sums need adding to another's. Columns past the last whole tile go a vector at a time, then one at a
// time through at(d, f), the weight as a float (a width that is not a multiple of kLanes). No chunk is smaller
// than 2^17 multiply-adds, where a task costs more than it saves.
template <int K, typename Load, typename At>
static void Product(ffi::ThreadPool& pool, int64_t max_chunks, const float* X, int64_t R, int64_t D, int64_t F,
                    const Load& load, const At& at, const float* post, float* Y) {
  const int64_t tiles = (F + kTile - 1) / kTile;
  int64_t n = std::min<int64_t>(pool.num_threads(), tiles);
  if (max_chunks > 0) n = std::min(n, max_chunks);
  n = std::max<int64_t>(1, std::min<int64_t>(n, R * D * F / (int64_t(1) << 17)));
  RunChunks(pool, n, [&](int64_t c) {
    const int64_t f1 = std::min(F, tiles * (c + 1) / n * kTile);
    int64_t f = std::min(F, tiles * c / n * kTile);
    const int64_t S = D / K, fw = f + (f1 - f) / kTile * kTile;
    for (int64_t s0 = 0; s0 < S; s0 += kBlockSteps) {  // a band of weight rows at a time, across the chunk's tiles
      const int64_t s1 = std::min(S, s0 + kBlockSteps);
      for (int64_t t = f; t < fw; t += kTile) TileAllRows<4, K>(X, R, D, F, t, s0, s1, load, post, Y);
    }
    for (f = fw; f + kLanes <= f1; f += kLanes) TileAllRows<1, K>(X, R, D, F, f, 0, S, load, post, Y);
    for (; f < f1; ++f)
      for (int64_t r = 0; r < R; ++r) {
        float a = 0.0f;
        for (int64_t d = 0; d < D; ++d) a += X[r * D + d] * at(d, f);
        Y[r * F + f] = post ? a * post[f] : a;
      }
  });
}

// The shapes of a product: the weight [D, F] or [L, D, F], x [R, D], y [R, F], and the layer in range.
static ffi::Error CheckRows(const char* what, ffi::Span<const int64_t> dims, int64_t nx, int64_t ny, int64_t l,
                            int64_t& D, int64_t& F, int64_t& L, int64_t& R) {
  const size_t rank = dims.size();
  if (rank != 2 && rank != 3) return ffi::Error::InvalidArgument(std::string(what) + ": weight must be [D, F] or [L, D, F]");
  D = dims[rank - 2], F = dims[rank - 1], L = rank == 3 ? dims[0] : 1;
  if (D <= 0 || nx % D || nx == 0) return ffi::Error::InvalidArgument(std::string(what) + ": x must be [R, D]");
  R = nx / D;
  if (ny != R * F) return ffi::Error::InvalidArgument(std::string(what) + ": y must be [R, F]");
  if (l < 0 || l >= L) return ffi::Error::InvalidArgument(std::string(what) + ": layer out of range");
  return ffi::Error::Success();
}

// y = (x @ q[layer]) * scale[layer]: int8 weights widened to float32 in registers, the per-column scale applied once.
static ffi::Error Int8Rowvec(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> q,
                             ffi::Buffer<ffi::F32> scale, ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y,
                             int64_t max_chunks) {
  int64_t D, F, L, R;
  const int64_t l = *layer.typed_data();
  auto bad = CheckRows("int8_rowvec", q.dimensions(), x.element_count(), y->element_count(), l, D, F, L, R);
  if (bad.failure()) return bad;
  if (int64_t(scale.element_count()) != L * F) return ffi::Error::InvalidArgument("int8_rowvec: scale must be [L, F]");
  const int8_t* Q = q.typed_data() + l * D * F;
  auto load = [Q, F](int64_t d, int64_t f, auto& w) {
    const int8_t* p = Q + d * F + f;
    __builtin_prefetch(p + kPrefetchRows * F);
    for (size_t c = 0; c < sizeof(w[0]) / sizeof(vf); ++c) w[0][c] = ToFloat(Widen(p + c * kLanes));
  };
  auto at = [Q, F](int64_t d, int64_t f) { return float(Q[d * F + f]); };
  Product<1>(pool, max_chunks, x.typed_data(), R, D, F, load, at, scale.typed_data() + l * F, y->typed_data());
  return ffi::Error::Success();
}

// The same for a float32 weight: a dynamic slice of a float32 stack is a pure copy before XLA's dot.
static ffi::Error F32Rowvec(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                            ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> y, int64_t max_chunks) {
  int64_t D, F, L, R;
  const int64_t l = *layer.typed_data();
  auto bad = CheckRows("f32_rowvec", w.dimensions(), x.element_count(), y->element_count(), l, D, F, L, R);
  if (bad.failure()) return bad;
  const float* W = w.typed_data() + l * D * F;
  auto load = [W, F](int64_t d, int64_t f, auto& v) {
    const float* p = W + d * F + f;
    for (size_t c = 0; c < sizeof(v[0]) / sizeof(vf); ++c) {  // a float32 tile row spans CV cache lines (AVX-512)
      __builtin_prefetch(p + kPrefetchRows * F + c * kLanes);
      v[0][c] = LoadF(p + c * kLanes);
    }
  };
  auto at = [W, F](int64_t d, int64_t f) { return W[d * F + f]; };
  Product<1>(pool, max_chunks, x.typed_data(), R, D, F, load, at, nullptr, y->typed_data());
  return ffi::Error::Success();
}

// The same for int4 (`Int4Weight`): packed[D/2, F] holds input rows 2j (low nibble) and 2j+1 (high nibble); each
// group of G input rows has a scale (and, asymmetric, a minimum) per column, applied as the nibbles are widened.
template <bool kMin>
static ffi::Error Int4Rowvec(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U8> packed,
                             ffi::Buffer<ffi::F32> scale, ffi::Buffer<ffi::F32> minimum, ffi::Buffer<ffi::S32> layer,
                             ffi::ResultBuffer<ffi::F32> y, int64_t max_chunks) {
  auto dims = packed.dimensions(), sdims = scale.dimensions();
  const size_t rank = dims.size();
  if (rank != 2 && rank != 3) return ffi::Error::InvalidArgument("int4_rowvec: packed must be [D/2, F] or [L, D/2, F]");
  const int64_t D2 = dims[rank - 2], F = dims[rank - 1], L = rank == 3 ? dims[0] : 1;
  const int64_t NG = sdims.size() == rank ? sdims[rank - 2] : 0, l = *layer.typed_data();
  if (NG <= 0 || D2 % NG) return ffi::Error::InvalidArgument("int4_rowvec: scale must be [L, D/G, F]");
  const uint32_t G2 = D2 / NG;  // bytes (row pairs) per group
  const int64_t D = 2 * D2, R = D2 > 0 ? x.element_count() / D : 0;
  if (R == 0 || x.element_count() != R * D) return ffi::Error::InvalidArgument("int4_rowvec: x must be [R, D]");
  if (scale.element_count() != L * NG * F) return ffi::Error::InvalidArgument("int4_rowvec: scale must be [L, D/G, F]");
  if (kMin && minimum.element_count() != L * NG * F)
    return ffi::Error::InvalidArgument("int4_rowvec: minimum must be shaped like scale");
  if (y->element_count() != R * F) return ffi::Error::InvalidArgument("int4_rowvec: y must be [R, F]");
  if (l < 0 || l >= L) return ffi::Error::InvalidArgument("int4_rowvec: layer out of range");
  const uint8_t* P = packed.typed_data() + l * D2 * F;
  const float* S = scale.typed_data() + l * NG * F;
  const float* M = kMin ? minimum.typed_data() + l * NG * F : nullptr;
  auto load = [=](int64_t j, int64_t f, auto& w) {
    const uint8_t* p = P + j * F + f;
    __builtin_prefetch(p + kPrefetchRows * F);
    const int64_t g = uint32_t(j) / G2 * F + f;
    for (size_t c = 0; c < sizeof(w[0]) / sizeof(vf); ++c) {
      const vi b = Widen(p + c * kLanes);  // the byte sign-extended: b >> 4 is the signed high nibble
      const vf s = LoadF(S + g + c * kLanes);
      w[0][c] = ToFloat(kMin ? b & 15 : (b << 28) >> 28) * s;
      w[1][c] = ToFloat(kMin ? (b >> 4) & 15 : b >> 4) * s;
      if (kMin) w[0][c] += LoadF(M + g + c * kLanes), w[1][c] += LoadF(M + g + c * kLanes);
    }
  };
  auto at = [=](int64_t d, int64_t f) {
    const int8_t b = int8_t(P[(d / 2) * F + f]);
    const int q = kMin ? (uint8_t(b) >> (4 * (d & 1))) & 15 : (d & 1 ? b >> 4 : int8_t(uint8_t(b) << 4) >> 4);
    const int64_t g = (d / 2) / G2 * F + f;
    return q * S[g] + (kMin ? M[g] : 0.0f);
  };
  Product<2>(pool, max_chunks, x.typed_data(), R, D, F, load, at, nullptr, y->typed_data());
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(MarinInt8Rowvec, Int8Rowvec,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("max_chunks"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(MarinF32Rowvec, F32Rowvec,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("max_chunks"));
#define MARIN_INT4_BINDING                     \
  ffi::Ffi::Bind()                             \
      .Ctx<ffi::ThreadPool>()                  \
      .Arg<ffi::Buffer<ffi::F32>>()            \
      .Arg<ffi::Buffer<ffi::U8>>()             \
      .Arg<ffi::Buffer<ffi::F32>>()            \
      .Arg<ffi::Buffer<ffi::F32>>()            \
      .Arg<ffi::Buffer<ffi::S32>>()            \
      .Ret<ffi::Buffer<ffi::F32>>()            \
      .Attr<int64_t>("max_chunks")
XLA_FFI_DEFINE_HANDLER_SYMBOL(MarinInt4Rowvec, Int4Rowvec<false>, MARIN_INT4_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(MarinInt4MinRowvec, Int4Rowvec<true>, MARIN_INT4_BINDING);
