//! Whether a case is ill-posed in its dtype (docs/DESIGN.md §3), decided exactly.

use super::case::*;
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
    use num_bigint::BigInt;
    use num_traits::{Signed, Zero};
    let geom = Geometry::new(case.layout, &case.shape, usize::MAX).ok()?;
    let eps = bnconf_spec::exact::parse::parse_rational(&case.eps).ok()?;
    let u = Rational::new(1.into(), BigInt::from(1u8) << case.dtype.precision());
    let x = case.inputs.get("x")?;
    let m = BigInt::from(geom.m);
    for c in 0..geom.c {
        let xs: Vec<f64> = geom.channel_offsets(c).map(|i| x[i]).collect();
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
        let p = case.dtype.precision();
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

#[cfg(test)]
mod ill_posed_tests {
    use super::*;
    use crate::suite::{generate, Filter, DEFAULT_SEED};
    use bnconf_spec::exact::round::FloatFormat;

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
