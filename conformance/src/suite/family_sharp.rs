//! Whether a family case judges sharply in its dtype: the generator's second rule after
//! ill-posedness, as `suite::discriminating` decides it for batch_norm (docs/DESIGN.md §3,
//! "Sharp verdicts").
//!
//! The controls are built-in known-bad family kernels whose defect any sharp budget must
//! reject ([`FAMILY_CONTROLS`]): per family a doubled variance (rms_norm: mean square) and an
//! `rstd` 25 % too large. A control's defect **shows** in a case when its outputs differ from
//! those of its family's two-pass kernel (the same algorithm without the defect, rounded to
//! the same dtypes). A case where some control's defect shows and yet every element of every
//! output stays within the gate (`ratio ≤ k`, the ratio against the exact value rounded to
//! f64 and the case's own budgets) is excluded as *non-discriminating* in its dtype, with the
//! reason: its verdicts would say nothing about these defects. The ratio here is within a
//! [`MARGIN`] of the judge's (which subtracts exactly), so a kept case rejects every control
//! in the judge too (`conformance/tests/family_sharp.rs` checks it on every family and
//! precision).

use crate::precision::family_budget::FamilyBudgets;
use bnconf_impl::family::{family_kernel_by_name, Family, FamilyCase};
use std::collections::BTreeMap;

/// A sharpness control: a known-bad kernel's name and its defect in words.
pub type Control = (&'static str, &'static str);

/// Per family: its two-pass kernel and its controls.
pub const FAMILY_CONTROLS: &[(Family, &str, &[Control])] = &[
    (
        Family::LayerNorm,
        "ln-twopass",
        &[
            ("bad-ln-var-doubled", "a doubled variance"),
            ("bad-ln-rstd-off25", "rstd 25 % off"),
        ],
    ),
    (
        Family::RmsNorm,
        "rms-twopass",
        &[
            ("bad-rms-ms-doubled", "a doubled mean square"),
            ("bad-rms-rstd-off25", "rstd 25 % off"),
        ],
    ),
    (
        Family::GroupNorm,
        "gn-twopass",
        &[
            ("bad-gn-var-doubled", "a doubled variance"),
            ("bad-gn-rstd-off25", "rstd 25 % off"),
        ],
    ),
];

/// A control counts as rejected only if some element's ratio exceeds the gate by this factor:
/// the ratio here is taken against the exact value rounded to f64, within 2^-52 relative of
/// the exact difference's, so a margin of 10^-3 keeps the decision on the judge's side.
pub const MARGIN: f64 = 1.001;

/// `Some(reason)` when a control's defect shows in `case` but every element stays within its
/// gate (module docs); `None` when the case discriminates. `exact` holds every output's exact
/// values rounded to f64, `budgets` the case's budgets and gates.
pub fn family_non_discriminating(
    case: &FamilyCase,
    exact: &BTreeMap<&'static str, Vec<f64>>,
    budgets: &FamilyBudgets,
) -> Option<String> {
    let family = case.op.family();
    let (_, good, controls) = FAMILY_CONTROLS.iter().find(|(f, ..)| *f == family)?;
    let reference = family_kernel_by_name(good)?.run(case).ok()?;
    for (name, defect) in controls.iter() {
        let Ok(out) = family_kernel_by_name(name)?.run(case) else {
            continue;
        };
        if out == reference {
            continue; // the defect does not change this case's answer
        }
        let mut worst = 0.0f64;
        let mut rejected = false;
        for (output, vals) in &out {
            let (Some(ex), Some(bs), Some(&k)) = (
                exact.get(output.as_str()),
                budgets.outputs.get(output.as_str()),
                budgets.gate.get(output.as_str()),
            ) else {
                continue;
            };
            let u = case.dtype_of(output).unit_roundoff();
            for ((&v, &e), b) in vals.iter().zip(ex).zip(bs) {
                let r = (v - e).abs() / (u * b.total(u));
                let r = if r.is_nan() { f64::INFINITY } else { r };
                worst = worst.max(r / k);
                rejected |= r > k * MARGIN;
            }
        }
        if !rejected {
            return Some(format!(
                "non-discriminating in {}: {name} ({defect}) changes the outputs yet stays within the \
                 budget (worst ratio {worst:.3} of the gate)",
                precision_name(case)
            ));
        }
    }
    None
}

fn precision_name(case: &FamilyCase) -> String {
    if case.param_dtype != case.dtype {
        format!("{}+{}", case.dtype.name(), case.param_dtype.name())
    } else {
        case.dtype.name().to_string()
    }
}
