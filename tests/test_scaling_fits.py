"Fitters recover known constants from noisy synthetic data; too little data is a clear error."

import math
import numpy as np, pandas as pd
import pytest
from marin.scaling.fits import (
    ParametricFit,
    fit_parabola,
    fit_power_law,
    fit_optimal_scaling,
    fit_parametric,
    forecast_loss,
    isoflop_fits,
)

TRUE = ParametricFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Chinchilla's approach-3 constants


def synthetic_runs(budgets=(1e18, 1e19, 1e20, 1e21), sizes=7, noise=0.005, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for C in budgets:
        for f in np.geomspace(1 / 8, 8, sizes):
            N = TRUE.optimal_params(C) * f
            D = C / (6 * N)
            rows.append(
                {"budget": C, "params": N, "tokens": D, "loss": float(TRUE(N, D)) * (1 + noise * rng.standard_normal())}
            )
    return pd.DataFrame(rows)


def test_parabola_recovers_vertex():
    rng = np.random.default_rng(1)
    x = np.linspace(5, 7, 9)
    y = 0.3 * (x - 6.2) ** 2 + 2.5 + 0.002 * rng.standard_normal(len(x))
    f = fit_parabola(1e18, 10**x, y)
    assert (
        abs(f.log10_n_opt - 6.2) < 0.05
        and abs(f.loss_opt - 2.5) < 0.005
        and f.d_opt == pytest.approx(1e18 / (6 * f.n_opt))
    )


def test_power_law_recovers_exponent():
    rng = np.random.default_rng(2)
    C = np.geomspace(1e17, 1e22, 8)
    y = 0.12 * C**0.49 * np.exp(0.03 * rng.standard_normal(len(C)))
    p = fit_power_law(C, y)
    assert abs(p.exponent - 0.49) < 0.02 and p.exponent_stderr < 0.02 and abs(math.log(p.coef / 0.12)) < 0.5


def test_isoflop_optima_recover_chinchilla_exponents():
    s = fit_optimal_scaling(synthetic_runs())
    a = TRUE.beta / (TRUE.alpha + TRUE.beta)
    assert abs(s.n_opt.exponent - a) < 0.04 and abs(s.d_opt.exponent - (1 - a)) < 0.04
    for f in s.fits:
        assert abs(math.log10(f.n_opt / TRUE.optimal_params(f.budget))) < 0.1


def test_parametric_fit_recovers_constants_and_forecasts():
    runs = synthetic_runs()
    fit = fit_parametric(runs.params, runs.tokens, runs.loss, grid="small")
    assert abs(fit.E - TRUE.E) < 0.1 and abs(fit.alpha - TRUE.alpha) < 0.06 and abs(fit.beta - TRUE.beta) < 0.06
    C = 1e22
    N = TRUE.optimal_params(C)
    fc = forecast_loss(runs, N, C / (6 * N), n_boot=12, grid="small")
    truth = float(TRUE(N, C / (6 * N)))
    assert abs(fc.error(truth)) < 0.01 and fc.low <= fc.loss <= fc.high and fc.n_boot >= 10


def test_robust_to_one_bad_run():
    runs = synthetic_runs(noise=0.002)
    clean = fit_parametric(runs.params, runs.tokens, runs.loss, grid="small")
    runs.loc[5, "loss"] *= 1.5
    dirty = fit_parametric(runs.params, runs.tokens, runs.loss, init=clean)
    assert abs(dirty(1e10, 2e11) / clean(1e10, 2e11) - 1) < 0.01


def test_too_little_data_is_a_clear_error():
    runs = synthetic_runs()
    with pytest.raises(ValueError, match=">= 3 budgets"):
        isoflop_fits(runs[runs.budget <= 1e19])
    with pytest.raises(ValueError, match=">= 3 distinct sizes"):
        fit_parabola(1e18, [1e6, 2e6], [3.0, 2.9])
    with pytest.raises(ValueError, match="not convex"):
        fit_parabola(1e18, [1e6, 2e6, 4e6], [3.0, 3.2, 3.0])
    with pytest.raises(ValueError, match=">= 5 runs"):
        fit_parametric([1, 2, 3], [1, 2, 3], [3, 2, 1])


def test_frontier_recovers_power_law_and_forecasts():
    "The isoFLOP-frontier forecast recovers a known L*(C) = k·C^gamma, curvature and N*(C) exponent from noisy runs."
    from marin.scaling.fits import fit_frontier, forecast_frontier

    rng = np.random.default_rng(3)
    rows = []
    for C in (1e10, 3e10, 1e11, 3e11):
        for x in np.linspace(-0.5, 0.5, 5):
            N = 0.1 * C**0.45 * 10**x
            rows.append(
                {
                    "budget": C,
                    "params": N,
                    "tokens": C / (6 * N),
                    "loss": 30 * C**-0.1 + 0.4 * x**2 + 0.003 * rng.standard_normal(),
                }
            )
    runs = pd.DataFrame(rows)
    fit = fit_frontier(runs)
    assert (
        abs(fit.frontier.exponent + 0.1) < 0.01
        and abs(fit.curvature - 0.4) < 0.1
        and abs(fit.n_opt.exponent - 0.45) < 0.05
    )
    assert 0.001 < fit.noise < 0.006
    C_f = 1.5e12
    N_f = 0.1 * C_f**0.45 * 10**0.1  # 0.1 decade off the optimum: penalty 0.4 · 0.01
    fc = forecast_frontier(runs, N_f, C_f / (6 * N_f), n_boot=30)
    truth = 30 * C_f**-0.1 + 0.4 * 0.1**2
    assert abs(fc.error(truth)) < 0.005 and fc.low <= fc.loss <= fc.high and fc.method == "frontier" and fc.n_boot >= 25
    assert fc.budget == pytest.approx(C_f)


def test_frontier_is_optimistic_when_loss_nears_its_floor():
    "On Chinchilla's constants (L* tends to E) the pure power law underestimates a decade out: a documented bias."
    from marin.scaling.fits import forecast_frontier

    runs = synthetic_runs(noise=0.002)
    C = 1e22
    N = TRUE.optimal_params(C)
    fc = forecast_frontier(runs, N, C / (6 * N), n_boot=5)
    assert -0.09 < fc.error(float(TRUE(N, C / (6 * N)))) < -0.02


def _frontier_runs(Lstar, budgets=(1e10, 3e10, 1e11, 3e11), noise=0.002, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for C in budgets:
        for x in np.linspace(-0.5, 0.5, 5):
            N = 0.1 * C**0.45 * 10**x
            rows.append(
                {
                    "budget": C,
                    "params": N,
                    "tokens": C / (6 * N),
                    "loss": float(Lstar(C)) + 0.4 * x**2 + noise * rng.standard_normal(),
                }
            )
    return pd.DataFrame(rows)


def test_log_quadratic_and_floor_frontiers_recover_constants():
    from marin.scaling.fits import fit_log_quadratic, fit_power_law_floor, fit_frontier_curve

    rng = np.random.default_rng(7)
    C = np.geomspace(1e10, 1e13, 7)
    x = np.log10(C) - 11.5
    L = 10 ** (0.55 - 0.085 * x - 0.0117 * x**2) * (1 + 0.001 * rng.standard_normal(len(C)))
    q = fit_log_quadratic(C, L)
    assert abs(q.c1 + 0.085) < 0.003 and abs(q.c2 + 0.0117) < 0.002 and q.slope(1e13) < q.slope(1e10)
    Cf = np.geomspace(1e16, 1e22, 7)
    f = fit_power_law_floor(Cf, (1.69 + 120 * Cf**-0.15) * (1 + 0.001 * rng.standard_normal(len(Cf))))
    assert abs(f.E - 1.69) < 0.15 and abs(f.exponent + 0.15) < 0.03
    assert fit_frontier_curve(C, L, "power-last2").exponent == pytest.approx(fit_power_law(C[-2:], L[-2:]).exponent)
    with pytest.raises(ValueError, match="unknown frontier method"):
        fit_frontier_curve(C, L, "spline")
    with pytest.raises(ValueError, match=">= 3 budgets"):
        fit_log_quadratic(C[:2], L[:2])


def test_backtest_selects_the_generating_shape():
    "Runs whose frontier steepens: the backtest finds the power law pessimistic and selects the log-log quadratic."
    from marin.scaling.fits import (
        LogQuadratic,
        PowerLaw,
        backtest_forecasts,
        backtest_summary,
        select_method,
        FRONTIER_METHODS,
        forecast_frontier,
        with_model_error,
    )

    steep = LogQuadratic(0.6, -0.07, -0.03, 10.5)
    runs = _frontier_runs(steep)
    extra = pd.DataFrame([{"budget": 1.5e12, "params": 3e4, "tokens": 1.5e12 / 1.8e5, "loss": float(steep(1.5e12))}])
    bt = backtest_forecasts(runs, FRONTIER_METHODS + ("parametric",), extra=extra)
    assert len(bt) == 2 * (len(FRONTIER_METHODS) + 1) and set(bt.ratio.round(2)) == {3.0, 5.0}
    assert select_method(bt) == "log-quadratic" and (bt[bt.method == "power"].error > 0.01).all()
    s = backtest_summary(bt)
    assert list(s.index) == list(FRONTIER_METHODS) + ["parametric"] and s.loc["log-quadratic", "mean_abs_error"] < 0.01
    assert select_method(backtest_forecasts(_frontier_runs(PowerLaw(30.0, -0.1), noise=0.001), FRONTIER_METHODS)) in (
        "power",
        "power-last3",
        "power+floor",
        "shape-mean",
    )
    fc = forecast_frontier(runs, 3e4, 1.5e12 / 1.8e5, n_boot=20, method="log-quadratic")
    assert abs(fc.error(float(steep(1.5e12)))) < 0.01 and fc.fit.method == "log-quadratic"
    w = with_model_error(fc, 0.02)
    assert w.low < fc.low and w.high > fc.high and w.loss == fc.loss
    with pytest.raises(ValueError, match="no backtest target"):
        backtest_forecasts(_frontier_runs(steep, budgets=(1e10, 3e10, 1e11)))
