"""The CPU decoding kernels on x86 CPUs older than this one. `marin.kernels.cpu_rowvec` compiles with `-march=native`,
so a test run only ever builds the code path of the machine it runs on (AVX-512 here). A user's CPU may have only
AVX2, or neither: each of those paths is built here through a compiler wrapper that swaps `-march=native` for an
older target, in its own process (the kernels register with XLA once per process), and checked against numpy."""

import os, platform, shutil, subprocess, sys, textwrap

import pytest

from conftest import REPO

CHECK = textwrap.dedent(
    """
    import numpy as np, jax.numpy as jnp
    from marin.kernels.cpu_rowvec import _library, f32_rowvec, int4_rowvec, int8_rowvec
    from marin.serve.quantize import dequantize_tree, quantize_int4, quantize_int8

    assert _library() is not None, "the kernels did not build"
    rng = np.random.default_rng(0)
    for D, F in ((576, 200), (40, 1537)):  # a wide tail of columns past the last whole tile and vector
        w = jnp.asarray(rng.standard_normal((D, F)), jnp.float32)
        for rows in (1, 3, 5, 16):  # one row, a partial group of rows, several groups and a rest
            x = jnp.asarray(rng.standard_normal((rows, D)), jnp.float32)
            np.testing.assert_allclose(f32_rowvec(x, w), x @ w, rtol=1e-4, atol=1e-3)
            q8 = quantize_int8(w)
            np.testing.assert_allclose(int8_rowvec(x, q8.q, q8.scale), x @ dequantize_tree(q8), rtol=1e-4, atol=1e-3)
            for asym in (False, True):
                q4 = quantize_int4(w, 8, asymmetric=asym)
                got = int4_rowvec(x, q4.packed, q4.scale, q4.minimum)
                np.testing.assert_allclose(got, x @ dequantize_tree(q4), rtol=1e-4, atol=1e-3)
    print("kernels agree")
    """
)


@pytest.mark.parametrize("march", ["haswell", "x86-64"])  # AVX2 (8 lanes, AVX2 widening); SSE2 only (generic code)
def test_kernels_built_for_an_older_cpu_agree_with_numpy(tmp_path, march):
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    if platform.machine() not in ("x86_64", "AMD64") or cxx is None:
        pytest.skip("needs an x86-64 machine with a C++ compiler")
    wrapper = tmp_path / f"c++-{march}"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do [ "$a" = "-march=native" ] && a="-march={march}"; set -- "$@" "$a"; shift; done\n'
        f'exec "{cxx}" "$@"\n'
    )
    wrapper.chmod(0o755)
    env = dict(os.environ, CXX=str(wrapper), MARIN_KERNEL_CACHE=str(tmp_path / "kernels"), JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "kernels agree" in r.stdout, r.stderr[-3000:]
    built = list((tmp_path / "kernels").glob("rowvec-*.so"))
    assert len(built) == 1
    objdump = shutil.which("objdump")
    dis = subprocess.run([objdump, "-d", str(built[0])], capture_output=True, text=True).stdout if objdump else ""
    if dis:  # the library really is the older target's: no AVX-512 registers (and no AVX at all for x86-64)
        assert "zmm" not in dis and ("ymm" in dis) == (march == "haswell")
