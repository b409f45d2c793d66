"""A hand-written float32 GEMM for the training step's small products, against XLA:CPU's (issue #22; not landed).

The `nano` step (`shakespeare_char`: width 128, MLP 352, 384 tokens per microbatch) is ~70% matrix products of
[384, 128] x [128, 352] and their transposes, which XLA:CPU runs through YNNPACK. This builds a register-tiled
product (6 rows x 64 columns of accumulators with AVX-512, A read through strides so x^T costs nothing, columns
and row blocks split over XLA's intra-op pool) on top of `marin.kernels.cpu_rowvec`'s source, and measures:

1. each product shape alone, XLA's dot against the kernel (best of 5 runs of --reps calls);
2. the nano train step with every float32 `dense` (forward and both backward products, through a `custom_vjp`)
   on the kernel, interleaved with the unchanged step in one process, --blocks blocks of 40 steps each.

    .venv/bin/python bench/train_gemm.py [--blocks 6] [--reps 300]"""

import argparse, ctypes, os, subprocess, tempfile
import jax, jax.numpy as jnp, numpy as np
import marin.models.layers as L, marin.models.transformer as TR
from marin.kernels import cpu_rowvec

from _nano_steps import best_ms, interleave, report, warmed

GEMM = r"""
#if defined(__AVX512F__)
constexpr int kMR = 6, kNV = 4;
#elif defined(__AVX2__)
constexpr int kMR = 4, kNV = 3;
#else
constexpr int kMR = 4, kNV = 2;
#endif
constexpr int64_t kGemmRows = 96;
template <int MR, int NV>
static void Micro(const float* __restrict A, int64_t sam, int64_t sak, const float* __restrict B, int64_t ldb,
                  int64_t K, float* __restrict C, int64_t ldc) {
  vf acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = vf{};
  for (int64_t k = 0; k < K; ++k) {
    vf b[NV];
    for (int c = 0; c < NV; ++c) b[c] = LoadF(B + k * ldb + c * kLanes);
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * sam + k * sak];
      for (int c = 0; c < NV; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NV; ++c) StoreF(C + r * ldc + c * kLanes, acc[r][c]);
}
template <int NV>
static void Rows(const float* A, int64_t sam, int64_t sak, const float* B, int64_t ldb, int64_t K, float* C,
                 int64_t ldc, int64_t m0, int64_t m1) {
  int64_t m = m0;
  for (; m + kMR <= m1; m += kMR) Micro<kMR, NV>(A + m * sam, sam, sak, B, ldb, K, C + m * ldc, ldc);
  for (; m < m1; ++m) Micro<1, NV>(A + m * sam, sam, sak, B, ldb, K, C + m * ldc, ldc);
}
static ffi::Error F32Gemm(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                          ffi::ResultBuffer<ffi::F32> c, bool transpose_a) {
  auto ad = a.dimensions(), bd = b.dimensions();
  const int64_t M = transpose_a ? ad[1] : ad[0], K = transpose_a ? ad[0] : ad[1], N = bd[1];
  if (ad.size() != 2 || bd.size() != 2 || bd[0] != K) return ffi::Error::InvalidArgument("f32_gemm: shapes");
  const float *A = a.typed_data(), *B = b.typed_data();
  float* C = c->typed_data();
  const int64_t sam = transpose_a ? 1 : K, sak = transpose_a ? M : 1, kPanel = kNV * kLanes;
  const int64_t panels = N / kPanel, rowblocks = (M + kGemmRows - 1) / kGemmRows, units = panels * rowblocks;
  int64_t n = std::max<int64_t>(1, std::min<int64_t>({int64_t(pool.num_threads()), units, M * K * N >> 17}));
  RunChunks(pool, n, [&](int64_t t) {
    for (int64_t u = units * t / n; u < units * (t + 1) / n; ++u) {
      const int64_t p = u / rowblocks, m0 = u % rowblocks * kGemmRows, m1 = std::min(M, m0 + kGemmRows);
      Rows<kNV>(A, sam, sak, B + p * kPanel, N, K, C + p * kPanel, N, m0, m1);
    }
  });
  int64_t j = panels * kPanel;
  for (; j + kLanes <= N; j += kLanes) Rows<1>(A, sam, sak, B + j, N, K, C + j, N, 0, M);
  for (; j < N; ++j)
    for (int64_t m = 0; m < M; ++m) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s += A[m * sam + k * sak] * B[k * N + j];
      C[m * N + j] = s;
    }
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(MarinF32Gemm, F32Gemm,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>().Attr<bool>("transpose_a"));
"""


def build():
    d = tempfile.mkdtemp()
    src, lib = os.path.join(d, "gemm.cc"), os.path.join(d, "gemm.so")
    with open(src, "w") as f:
        f.write(cpu_rowvec.SOURCE + GEMM)
    flags = ["-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}"]
    subprocess.run([os.environ.get("CXX", "c++"), *flags, src, "-o", lib], check=True)
    fn = ctypes.cdll.LoadLibrary(lib).MarinF32Gemm
    jax.ffi.register_ffi_target("bench_f32_gemm", jax.ffi.pycapsule(fn), platform="cpu")


def gemm(a, b, transpose_a=False):
    m = a.shape[1] if transpose_a else a.shape[0]
    out = jax.ShapeDtypeStruct((m, b.shape[1]), jnp.float32)
    return jax.ffi.ffi_call("bench_f32_gemm", out)(a, b, transpose_a=transpose_a)


@jax.custom_vjp
def matmul(x, w):
    return gemm(x, w)


matmul.defvjp(lambda x, w: (gemm(x, w), (x, w)), lambda r, g: (gemm(g, r[1].T), gemm(r[0], g, True)))
xla_dense = L.dense


def kernel_dense(x, w, out_dtype=None):
    if x.dtype != jnp.float32 or w.dtype != jnp.float32 or w.ndim != 2:
        return xla_dense(x, w, out_dtype)
    return matmul(x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[-1])


def both(ta: bool):
    "XLA's product and the kernel's, jitted, for A = a or a^T."
    return jax.jit(lambda a, b: (a.T if ta else a) @ b), jax.jit(lambda a, b: gemm(a, b, ta))


def products(reps):
    print("| product (M x K x N) | A | XLA us | GFLOP/s | kernel us | GFLOP/s | speed-up | max err vs float64 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for M, K, N, ta in [
        (384, 128, 352, 0),
        (384, 352, 128, 0),
        (384, 128, 128, 0),
        (128, 384, 352, 1),
        (352, 384, 128, 1),
        (128, 384, 128, 1),
        (2048, 384, 1024, 0),
        (1024, 1024, 1024, 0),
    ]:
        a = jnp.asarray(rng.standard_normal((K, M) if ta else (M, K)), jnp.float32)
        b = jnp.asarray(rng.standard_normal((K, N)), jnp.float32)
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        ref = a64.T @ b64 if ta else a64 @ b64
        xla, ours = both(bool(ta))
        err = float(np.abs(np.asarray(ours(a, b)) - ref).max())
        n = reps if M * K * N < 1e8 else reps // 10
        tx, tk = best_ms(xla, (a, b), n), best_ms(ours, (a, b), n)
        gf = 2 * M * K * N / 1e6
        print(
            f"| {M} x {K} x {N} | {'x^T' if ta else 'x'} | {tx * 1e3:.0f} | {gf / tx:.0f} | {tk * 1e3:.0f} | "
            f"{gf / tk:.0f} | {tx / tk:.2f}x | {err:.1e} |"
        )


def steps(blocks):
    runs = {}
    for name, dense in (("XLA dot", xla_dense), ("kernel", kernel_dense)):
        L.dense = TR.dense = dense  # read when `warmed` traces the step
        runs[name] = warmed()
    L.dense = TR.dense = xla_dense
    interleave(runs, blocks, 40)
    report(runs)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--reps", type=int, default=300)
    a = ap.parse_args()
    build()
    print(f"load {os.getloadavg()}")
    products(a.reps)
    steps(a.blocks)
    print(f"load {os.getloadavg()}")
