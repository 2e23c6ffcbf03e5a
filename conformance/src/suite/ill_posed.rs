//! Whether a case is ill-posed in its dtype (docs/DESIGN.md §3), decided exactly.

use super::case::*;
use bnconf_spec::exact::round::FloatFormat;
use bnconf_spec::exact::QSqrt;
use bnconf_spec::{Geometry, Op, Rational};

/// Whether a case is ill-posed in its dtype (docs/DESIGN.md §3), decided exactly: with
/// `cond_q = Σ_j |∂q/∂in_j|·|in_j|` the sensitivity of `q = var + eps` (per channel) to
/// relative perturbations of the inputs, the case is ill-posed when `u·cond_q ≥ q/2` (the
/// first-order move of all inputs together), when a relative move of `u` of **one** input
/// moves `q` by `q/2` or more — decided exactly, not linearised: `q` is quadratic in each
/// input, so moving `x_j` to `x_j·(1 + t)` changes it by `2t·x_j·d_j/m + t²·x_j²·(m−1)/m²`
/// (`d_j = x_j − mean`), largest at `|t| = u`: `2u·|x_j·d_j|/m + u²·x_j²·(m−1)/m²` (a constant
/// channel, where `∂q/∂x` vanishes, is ill-posed when `u²·x²·(m−1)/m² ≥ (var + eps)/2`: a
/// half type that cannot hold its cells apart) — or when `q ≤ 0` (undefined). Returns the
/// reason.
pub fn ill_posed(case: &SuiteCase) -> Option<String> {
    if matches!(case.op, Op::Forward | Op::Backward) {
        return ill_posed_batch(case);
    }
    ill_posed_exact(case)
}

/// [`ill_posed`] through the exact problem's rational arithmetic, for every op (the
/// reference [`ill_posed_batch`] is tested against).
pub(super) fn ill_posed_exact(case: &SuiteCase) -> Option<String> {
    let p = case.problem();
    // q depends on the activations (forward, backward) or on the handed-in statistics.
    let q_dtype = match case.op {
        Op::Forward | Op::Backward => case.dtype,
        _ => case.param_dtype,
    };
    let u = Rational::new(
        1.into(),
        num_bigint::BigInt::from(1u8) << q_dtype.precision(),
    );
    let eps = QSqrt::rational(p.eps.clone());
    for c in 0..p.geom.c {
        let inp = p.channel_inputs(c).ok()?;
        let one = |k: &str| inp.values[k][0].clone();
        let uq = QSqrt::rational(u.clone());
        // q, cond_q, and the largest move of q by one input's relative move of u.
        let (qv, cond, one_move) = match case.op {
            Op::Forward | Op::Backward => {
                let x = &inp.values["x"];
                let (mu, var) = bnconf_spec::channel::batch_stats(x);
                let m = QSqrt::int(x.len() as i64);
                let mut s = QSqrt::int(0);
                let mut worst = QSqrt::int(0);
                for v in x {
                    let t = &(v - &mu).abs() * &v.abs();
                    s = s + &t;
                    // 2u·|x_j·d_j|/m + u²·x_j²·(m−1)/m²
                    let mv = &(&(&QSqrt::int(2) * &uq) * &t) / &m
                        + &(&(&(&(&uq * &uq) * &(v * v)) * &(&m - &QSqrt::int(1))) / &(&m * &m));
                    if (&mv - &worst).signum() > 0 {
                        worst = mv;
                    }
                }
                (&var + &eps, &(&QSqrt::int(2) * &s) / &m, worst)
            }
            Op::Eval => (
                &one("var") + &eps,
                one("var").abs(),
                &uq * &one("var").abs(),
            ),
            Op::SyncForward | Op::SyncBackward => {
                let (mu, m2) = (one("mean"), one("m2"));
                let var = bnconf_spec::channel::sync_var(&mu, &m2);
                // mean·(1+t): q moves by (2t + t²)·mean²; m2·(1+t): by t·m2.
                let mu2 = &mu * &mu;
                let by_mean = &(&(&QSqrt::int(2) * &uq) + &(&uq * &uq)) * &mu2;
                let by_m2 = &uq * &m2.abs();
                let worst = if (&by_mean - &by_m2).signum() > 0 {
                    by_mean
                } else {
                    by_m2
                };
                (&var + &eps, &m2.abs() + &(&QSqrt::int(2) * &mu2), worst)
            }
            // No square root: nothing is ill-posed.
            Op::RunningUpdate | Op::SyncStats => return None,
        };
        if qv.signum() <= 0 {
            return Some(format!("channel {c}: var + eps = {} <= 0", qv));
        }
        let lhs = &uq * &cond;
        let rhs = &qv / &QSqrt::int(2);
        if (&lhs - &rhs).signum() >= 0 {
            return Some(format!("channel {c}: u*cond(var+eps) >= (var+eps)/2"));
        }
        if (&one_move - &rhs).signum() >= 0 {
            return Some(one_input_reason(c));
        }
    }
    None
}

/// The reason given when one input's relative move of `u` moves `q` by half of itself.
fn one_input_reason(c: usize) -> String {
    format!("channel {c}: one input moved by u (relatively) moves var+eps by >= (var+eps)/2")
}

/// `x = X·2^E` exactly for every value (`E` the least exponent among them; `X` integers).
pub(super) fn dyadic_ints(xs: &[f64]) -> (Vec<num_bigint::BigInt>, i64) {
    use num_bigint::BigInt;
    // f64 = mant · 2^exp with an integer mant (|mant| < 2^53).
    let parts: Vec<(i64, i64)> = xs
        .iter()
        .map(|&v| crate::fast::acc::signed_parts(v))
        .collect();
    let e_min = parts
        .iter()
        .filter(|p| p.0 != 0)
        .map(|p| p.1)
        .min()
        .unwrap_or(0);
    let ints = parts
        .iter()
        .map(|&(mant, exp)| BigInt::from(mant) << (exp - e_min) as usize)
        .collect();
    (ints, e_min)
}

/// [`ill_posed`] for `forward` and `backward` (q from the batch's own statistics), in
/// integers: with `x_i = X_i·2^E`, `S = ΣX_i`, `var + eps = (m·ΣX_i² − S²)·2^(2E)/m² + eps`
/// and `cond = 2·Σ|x_i − mean|·|x_i|/m = 2·Σ|m·X_i − S|·|X_i|·2^(2E)/m²` — the same exact
/// values as the rational sums of [`ill_posed`]'s other ops, without a gcd per element.
pub(super) fn ill_posed_batch(case: &SuiteCase) -> Option<String> {
    ill_posed_batch_with(case, true)
}

/// [`ill_posed_batch`], each channel first tested in f64 ([`proven_well_posed`]) where
/// `quick`, or every channel exactly.
fn ill_posed_batch_with(case: &SuiteCase, quick: bool) -> Option<String> {
    batch_test(case, case.inputs.get("x")?, quick)
}

/// [`ill_posed`] of a forward or backward case without inputs (`case`: its op, shape, dtype
/// and eps) whose cells `x` the fast problem `fp` holds (`None` for other ops: they are
/// decided on their inputs).
pub fn ill_posed_cells(case: &SuiteCase, fp: &crate::fast::FastProblem) -> Option<String> {
    use crate::formats::npy::NpyData;
    if !matches!(case.op, Op::Forward | Op::Backward) {
        return None;
    }
    match &fp.x {
        NpyData::F32(x) => batch_test(case, x, true),
        NpyData::F64(x) => batch_test(case, x, true),
        NpyData::F16(x) => batch_test(
            case,
            &x.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            true,
        ),
        d @ NpyData::U16(_) => batch_test(case, &d.bf16_values(), true),
    }
}

/// [`ill_posed_batch_with`] of the case's cells `x`.
fn batch_test<T: Copy + Into<f64>>(case: &SuiteCase, x: &[T], quick: bool) -> Option<String> {
    use num_bigint::BigInt;
    use num_traits::{Signed, Zero};
    let geom = Geometry::new(case.layout, &case.shape, usize::MAX).ok()?;
    let eps = bnconf_spec::exact::parse::parse_rational(&case.eps).ok()?;
    let u = Rational::new(1.into(), BigInt::from(1u8) << case.dtype.precision());
    let m = BigInt::from(geom.m);
    let p = case.dtype.precision();
    // Correctly rounded: within a relative 2^-53 (and 2^-1075) of eps.
    let eps_f = bnconf_spec::exact::round::round_rational(&eps, FloatFormat::F64).to_f64();
    for c in 0..geom.c {
        // Most channels are proven well-posed in f64 with rigorous error bounds; the exact
        // test decides every other one (and words the reason).
        if quick
            && proven_well_posed(
                || geom.channel_offsets(c).map(|i| x[i].into()),
                geom.m,
                eps_f,
                p,
            )
        {
            continue;
        }
        let xs: Vec<f64> = geom.channel_offsets(c).map(|i| x[i].into()).collect();
        let (ints, e) = dyadic_ints(&xs);
        let s: BigInt = ints.iter().sum();
        let s2: BigInt = ints.iter().map(|v| v * v).sum();
        let mut abs_sum = BigInt::zero();
        for v in &ints {
            abs_sum += (&m * v - &s).abs() * v.abs();
        }
        // value·2^(2E)/m² as an exact rational.
        let scaled = |num: BigInt| -> Rational {
            let den = &m * &m;
            if e >= 0 {
                Rational::new(num << (2 * e) as usize, den)
            } else {
                Rational::new(num, den << (-2 * e) as usize)
            }
        };
        // The largest single-input move of q, times 2^(2p)·m²/2^(2E): with u = 2^-p,
        // max_j 2·2^p·|X_j|·|m·X_j − S| + X_j²·(m − 1).
        let mut worst = BigInt::zero();
        for v in &ints {
            let t = ((v.abs() * (&m * v - &s).abs()) << (p as usize + 1)) + v * v * (&m - 1);
            if t > worst {
                worst = t;
            }
        }
        let qv = scaled(&m * &s2 - &s * &s) + &eps;
        let cond = scaled(abs_sum * 2);
        if !qv.is_positive() {
            return Some(format!(
                "channel {c}: var + eps = {} <= 0",
                QSqrt::rational(qv)
            ));
        }
        let half_q = &qv / Rational::from_integer(2.into());
        if &u * &cond >= half_q {
            return Some(format!("channel {c}: u*cond(var+eps) >= (var+eps)/2"));
        }
        if &u * &u * scaled(worst) >= half_q {
            return Some(one_input_reason(c));
        }
    }
    None
}

/// Whether a channel of `m` cells `xs()` (values of a format with unit roundoff `u = 2^-p`;
/// `eps_f` within a relative 2^-52 of `eps`) is proven well-posed by f64 arithmetic: both
/// tests of [`ill_posed`] (`u·cond_q < q/2`, and one input's move below `q/2`) hold on upper
/// bounds of their left sides and a lower bound of `q = var + eps`. `false` where that is not
/// proven (the exact test decides): ill-posed, near the threshold, non-finite, very large or
/// very small values, or `m` too large for the bounds.
///
/// The bounds (γ = 2^-53, every factor below at least twice the textbook one): the computed
/// mean `mean_f = fl(fl(Σx)/m)` is within `D = (m + 2)·2^-52·Σ|x|/m` of the mean; a cell's
/// `t = |x − mean|·|x|` is at most `t̂·(1 + 2^-50) + D·|x|` (`t̂` computed from `mean_f`);
/// a sum of `m` non-negative computed terms is within a relative `(m + 8)·2^-51` of the
/// exact sum of those terms; `m·var = Σ(x − mean_f)² − m·(mean − mean_f)²`; products that
/// underflow lose at most 2^-1074 each (`m·2^-1070` in all).
fn proven_well_posed<I: Iterator<Item = f64>>(
    xs: impl Fn() -> I,
    m: usize,
    eps_f: f64,
    p: u32,
) -> bool {
    if m == 0 || m > 1 << 40 || eps_f.is_nan() || eps_f < 0.0 || eps_f.is_infinite() || p > 60 {
        return false;
    }
    let (mut s, mut a1, mut amax) = (0.0f64, 0.0f64, 0.0f64);
    for x in xs() {
        s += x;
        a1 += x.abs();
        amax = amax.max(x.abs());
    }
    // Non-finite (NaN fails the test too), or outside the range where no square overflows.
    if amax.is_nan() || amax > 2f64.powi(300) || amax < 2f64.powi(-300) {
        return false;
    }
    let mf = m as f64;
    let mean_f = s / mf;
    let rel = (mf + 8.0) * 2f64.powi(-51);
    let tiny = mf * 2f64.powi(-1070);
    let d = (mf + 2.0) * 2f64.powi(-52) * (a1 / mf) * (1.0 + rel);
    let (mut v, mut ct, mut tmax, mut x2max) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for x in xs() {
        let dx = x - mean_f;
        let t = dx.abs() * x.abs();
        v += dx * dx;
        ct += t;
        tmax = tmax.max(t);
        x2max = x2max.max(x * x);
    }
    let u = 2f64.powi(-(p as i32));
    // Lower bound of q = var + eps (var ≥ 0; `v·2^-50/m` covers the roundings of the
    // difference's terms, which may cancel).
    let var_lo = ((v * (1.0 - rel) - tiny - mf * d * d * (1.0 + 2f64.powi(-50))) / mf)
        * (1.0 - 2f64.powi(-50))
        - v * 2f64.powi(-50) / mf;
    let eps_lo = eps_f - eps_f * 2f64.powi(-51) - 2f64.powi(-1070);
    let q_lo = (var_lo.max(0.0) + eps_lo.max(0.0)) * (1.0 - 2f64.powi(-50));
    if q_lo.is_nan() || q_lo <= 0.0 {
        return false;
    }
    // Upper bounds of u·cond_q = u·2·Σt/m and of the largest single move.
    let c_hi =
        ((ct * (1.0 + 2f64.powi(-50)) + d * a1) * (1.0 + rel) + tiny) * (1.0 + 2f64.powi(-50));
    let cond_hi = 2.0 * c_hi / mf * (1.0 + 2f64.powi(-50));
    let t_hi = tmax * (1.0 + 2f64.powi(-50)) + d * amax + 2f64.powi(-1070);
    let worst_hi = (2.0 * u * t_hi / mf + u * u * x2max * (mf - 1.0) / (mf * mf))
        * (1.0 + 2f64.powi(-48))
        + 2f64.powi(-1070);
    u * cond_hi < q_lo / 2.0 && worst_hi < q_lo / 2.0
}

#[cfg(test)]
mod ill_posed_tests {
    use super::*;
    use crate::suite::{generate, Filter, Rng, DEFAULT_SEED};
    use bnconf_spec::exact::round::f64_to_rational;

    /// The f64 test proves a channel well-posed only where the exact test finds it so, and
    /// the batch test with it decides as without it: on generated channels (1 to 300 cells;
    /// centred, offset, large-mean, constant, tiny and huge values; the four formats' u) with
    /// eps at each of the two exact thresholds (`u·cond_q = q/2`, and one input's move
    /// `= q/2`) and at relative distances 0, ±2^-60, ±2^-45, ±2^-30, ±2^-10 and +2^-3, +1, +2^3
    /// from it. 256 channels (more with PROPTEST_CASES); most far-from-threshold ones proven.
    #[test]
    fn the_f64_test_proves_only_well_posed_channels() {
        use num_traits::{Signed, Zero};
        let n: usize = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256);
        let mut rng = Rng::new(DEFAULT_SEED).fork("ill-posed-quick");
        let two = |k: i32| -> Rational {
            let one = num_bigint::BigInt::from(1u8);
            if k >= 0 {
                Rational::from_integer(one << k as usize)
            } else {
                Rational::new(one, num_bigint::BigInt::from(1u8) << (-k) as usize)
            }
        };
        let (mut proven, mut well, mut ill) = (0, 0, 0);
        for i in 0..n {
            let m = [1, 2, 3, 7, 64, 300][i % 6];
            let kind = (i / 6) % 6;
            let (mu, sd) = match kind {
                0 => (0.0, 1.0),
                1 => (rng.range(-3.0, 3.0), rng.range(0.5, 2.0)),
                2 => (1e3 * rng.range(1.0, 4.0), 1.0),
                3 => (rng.range(-3.0, 3.0), 0.0),
                4 => (1e-200, 1e-201),
                _ => (1e200, 1e199),
            };
            let xs: Vec<f64> = (0..m).map(|_| mu + sd * rng.normal()).collect();
            let dtype = FloatFormat::ALL[i % 4];
            let (p, u) = (dtype.precision(), two(-(dtype.precision() as i32)));
            let q: Vec<Rational> = xs.iter().map(|&v| f64_to_rational(v).unwrap()).collect();
            let mr = Rational::from_integer((m as i64).into());
            let mean = q.iter().fold(Rational::zero(), |a, b| a + b) / &mr;
            let var = q
                .iter()
                .fold(Rational::zero(), |a, v| a + (v - &mean) * (v - &mean))
                / &mr;
            let cond = q
                .iter()
                .fold(Rational::zero(), |a, v| a + (v - &mean).abs() * v.abs())
                * Rational::from_integer(2.into())
                / &mr;
            let worst = q
                .iter()
                .map(|v| {
                    Rational::from_integer(2.into()) * &u * (v * (v - &mean)).abs() / &mr
                        + &u * &u * v * v * (&mr - Rational::from_integer(1.into())) / (&mr * &mr)
                })
                .max()
                .unwrap();
            let two_r = Rational::from_integer(2.into());
            for t in [&two_r * &u * &cond - &var, &two_r * &worst - &var] {
                if !t.is_positive() {
                    continue;
                }
                for (sign, k) in [
                    (0, 0),
                    (1, -60),
                    (-1, -60),
                    (1, -45),
                    (-1, -45),
                    (1, -30),
                    (-1, -30),
                    (1, -10),
                    (-1, -10),
                    (1, -3),
                    (1, 0),
                    (1, 3),
                ] {
                    let eps = &t + Rational::from_integer(sign.into()) * &t * two(k);
                    let mut c = SuiteCase {
                        id: format!("channel{i}"),
                        level: crate::suite::Level::Core,
                        class: "test".into(),
                        target: String::new(),
                        dtype,
                        param_dtype: dtype,
                        op: Op::Forward,
                        layout: bnconf_spec::Layout::Nchw,
                        shape: vec![1, 1, 1, m],
                        eps: format!("{}/{}", eps.numer(), eps.denom()),
                        momentum: None,
                        convention: None,
                        inputs: Default::default(),
                        shard_sizes: vec![],
                    };
                    c.inputs.insert("x".into(), xs.clone());
                    let eps_f =
                        bnconf_spec::exact::round::round_rational(&eps, FloatFormat::F64).to_f64();
                    let exact = ill_posed_batch_with(&c, false);
                    let quick = proven_well_posed(|| xs.iter().copied(), m, eps_f, p);
                    assert!(
                        !(quick && exact.is_some()),
                        "channel {i} ({m} cells, {}) eps {}: proven well-posed, exactly {exact:?}",
                        dtype.name(),
                        c.eps
                    );
                    assert_eq!(ill_posed_batch(&c), exact, "channel {i}");
                    proven += quick as usize;
                    match exact {
                        Some(_) => ill += 1,
                        None => well += 1,
                    }
                }
            }
        }
        assert!(ill > n && well > n, "{ill} ill-posed, {well} well-posed");
        assert!(4 * proven > well, "{proven} proven of {well} well-posed");
    }

    /// The integer form of forward/backward's test decides exactly as the rational one, on
    /// the default suite's forward and backward cases re-read in every dtype's u and with
    /// eps = 0 (so that both outcomes, and `var + eps <= 0`, occur).
    #[test]
    fn batch_form_equals_the_rational_form() {
        let s = generate(
            "default",
            &[FloatFormat::F64, FloatFormat::F32],
            DEFAULT_SEED,
            &Filter::default(),
        )
        .unwrap();
        let (mut some, mut none, mut nonpos) = (0, 0, 0);
        for c in s
            .cases
            .iter()
            .filter(|c| matches!(c.op, Op::Forward | Op::Backward))
        {
            for dt in [
                FloatFormat::F64,
                FloatFormat::F32,
                FloatFormat::F16,
                FloatFormat::BF16,
            ] {
                for eps in [c.eps.clone(), "0".to_string()] {
                    let mut v = c.clone();
                    v.dtype = dt;
                    v.eps = eps;
                    let (a, b) = (ill_posed_batch(&v), ill_posed_exact(&v));
                    assert_eq!(a, b, "{} as {} eps {}", c.id, dt.name(), v.eps);
                    match &a {
                        Some(r) if r.contains("<= 0") => nonpos += 1,
                        Some(_) => some += 1,
                        None => none += 1,
                    }
                }
            }
        }
        assert!(
            some > 10 && none > 100 && nonpos > 0,
            "{some} {none} {nonpos}"
        );
    }
}
