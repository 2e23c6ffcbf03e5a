//! The family's ops as named items (FORMAT.md "Ops of the family"; docs/SPEC.md "The
//! normalization family", F1–F8): each is [`normalize`] or its closed-form backward over the
//! grouping of its layout — one computation, several groupings.
//!
//! Constraints shared by every item (numbered as the seed's):
//! - (C1) `q = var + eps > 0` (rms_norm: `Σx²/K + eps > 0`) in every group, else
//!   [`SpecError::NonPositiveVariance`] naming the group; `eps ≥ 0`.
//! - (C2) `x`, `dy` have one value per cell; `gamma`, `beta` one per parameter, and are given
//!   exactly when `affine` has them ([`SpecError::Length`], `MissingInput`, `UnknownInput`).
//! - (C3) the shape fits the layout, no extent is 0 ([`SpecError::Shape`]); `normalized_ndim`
//!   is 1..=3 with at least one batch axis; `groups` divides C ([`SpecError::BadParam`]).

use super::grouping::{ChannelLayout, Grouping};
use super::norm::{
    normalize, normalize_backward, Affine, Backward, Centering, Forward, Inputs, Norm,
    RmsConvention,
};
use crate::error::SpecError;
use crate::exact::QSqrt;
use crate::num::Scalar;

/// The [`Norm`] of layer_norm with `affine`.
pub fn layer_norm_kind(affine: Affine) -> Norm {
    Norm {
        op: "layer_norm",
        centering: Centering::Mean,
        affine,
        convention: RmsConvention::Standard,
    }
}

/// The [`Norm`] of rms_norm; (C4) `affine` is `weight` or `none` (rms_norm has no beta).
pub fn rms_norm_kind(affine: Affine, convention: RmsConvention) -> Result<Norm, SpecError> {
    if affine.has_bias() {
        return Err(SpecError::BadParam {
            field: "affine",
            reason: "rms_norm takes `weight` or `none` (it has no beta)",
            value: affine.name().into(),
        });
    }
    Ok(Norm {
        op: "rms_norm",
        centering: Centering::Zero,
        affine,
        convention,
    })
}

/// The [`Norm`] of group_norm with `affine`.
pub fn group_norm_kind(affine: Affine) -> Norm {
    Norm {
        op: "group_norm",
        centering: Centering::Mean,
        affine,
        convention: RmsConvention::Standard,
    }
}

/// The [`Norm`] of batch_norm (gamma and beta, as the seed's items).
pub fn batch_norm_kind() -> Norm {
    Norm {
        op: "batch_norm",
        centering: Centering::Mean,
        affine: Affine::WeightBias,
        convention: RmsConvention::Standard,
    }
}

/// **F1 `layer_norm`** — layout `last`: `x` of shape `[*batch, *normalized]`, each row (batch
/// index) normalized over its `K` = product of the trailing `normalized_ndim` extents:
/// `mean = Σx/K`, `var = Σ(x − mean)²/K`, `rstd = (var + eps)^(−1/2)`,
/// `y = gamma·(x − mean)·rstd + beta` with `gamma`, `beta` of the normalized shape
/// (elementwise). Outputs `y`, and per row `mean`, `rstd`. (C1)–(C3).
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::family::{layer_norm, Affine, Inputs};
/// let q = |s: &str| parse_exact(s).unwrap();
/// // one row [1, 3], eps = 1: mean 2, var 1, q = 2, rstd = sqrt(2)/2, xhat = ∓sqrt(2)/2
/// let (x, gamma, beta) = ([q("1"), q("3")], [q("2"), q("3")], [q("1/2"), q("0")]);
/// let eps = q("1");
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: Some(&beta), eps: &eps };
/// let f = layer_norm(&[1, 2], 1, Affine::WeightBias, inp).unwrap();
/// assert_eq!(f.y, [q("1/2 - 1*sqrt(2)"), q("3/2*sqrt(2)")]);
/// assert_eq!(f.mean, Some(vec![q("2")]));
/// assert_eq!(f.rstd, [q("1/2*sqrt(2)")]);
/// ```
pub fn layer_norm<T: Scalar>(
    shape: &[usize],
    normalized_ndim: usize,
    affine: Affine,
    inp: Inputs<'_, T>,
) -> Result<Forward<T>, SpecError> {
    let g = Grouping::last(shape, normalized_ndim)?;
    normalize(&g, &layer_norm_kind(affine), inp)
}

/// **F2 `layer_norm_backward`** — the VJP of F1 with cotangent `dy`, in closed form: per row,
/// with `g = dy·gamma`, `dx = rstd·(g − mean(g) − xhat·mean(g·xhat))` (three terms);
/// `dgamma_j = Σ_rows dy·xhat` at normalized position `j` (a sum of roots: each row has its
/// own radicand), `dbeta_j = Σ_rows dy`. Must equal `Jᵀdy` of F1 exactly (tested).
/// (C1)–(C3).
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::exact::roots::parse_sum_of_roots;
/// use bnconf_spec::family::{layer_norm_backward, Affine, Inputs};
/// let q = |s: &str| parse_exact(s).unwrap();
/// // rows [1, 3] (q = 2) and [0, 4] (q = 5), eps = 1; dy = [1, 0, 1, 0]
/// let x = [q("1"), q("3"), q("0"), q("4")];
/// let dy = [q("1"), q("0"), q("1"), q("0")];
/// let gamma = [q("1"), q("1")];
/// let eps = q("1");
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: None, eps: &eps };
/// let b = layer_norm_backward(&[2, 2], 1, Affine::WeightBias, inp, &dy).unwrap();
/// let dgamma = b.dgamma.unwrap();
/// assert_eq!(dgamma[0].to_string(), "0 + -1/2*sqrt(2) + -2/5*sqrt(5)");
/// assert_eq!(dgamma[0], parse_sum_of_roots("-1/2*sqrt(2) - 2/5*sqrt(5)").unwrap());
/// assert_eq!(dgamma[1].to_string(), "0");
/// assert_eq!(b.dbeta, Some(vec![q("2"), q("0")]));
/// assert_eq!(b.dx[..2], [q("1/8*sqrt(2)"), q("-1/8*sqrt(2)")]);
/// ```
pub fn layer_norm_backward(
    shape: &[usize],
    normalized_ndim: usize,
    affine: Affine,
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
) -> Result<Backward, SpecError> {
    let g = Grouping::last(shape, normalized_ndim)?;
    normalize_backward(&g, &layer_norm_kind(affine), inp, dy)
}

/// **F3 `rms_norm`** — layout `last`, per row of `K` cells: `rstd = (Σx²/K + eps)^(−1/2)`,
/// `xhat = x·rstd`, `y = w·xhat` with `w = gamma` (convention `standard`), `1 + gamma`
/// (`offset`, as Gemma writes it) or 1 (affine `none`). Outputs `y` and per row `rstd` (no
/// mean). (C1)–(C3), (C4) affine is `weight` or `none`.
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::family::{rms_norm, Affine, Inputs, RmsConvention};
/// let q = |s: &str| parse_exact(s).unwrap();
/// // [3, 4], eps = 0: q = Σx²/K = 25/2, rstd = 1/sqrt(q) = 2/25·sqrt(25/2) (= sqrt(2)/5,
/// // written in the row's field Q(sqrt(q)) as every value of the row); offset gamma
/// // [1, 1/2]: w = [2, 3/2]
/// let (x, gamma) = ([q("3"), q("4")], [q("1"), q("1/2")]);
/// let eps = q("0");
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: None, eps: &eps };
/// let f = rms_norm(&[1, 2], 1, Affine::Weight, RmsConvention::Offset, inp).unwrap();
/// assert_eq!(f.y, [q("12/25*sqrt(25/2)"), q("12/25*sqrt(25/2)")]);
/// assert_eq!((f.mean, f.rstd), (None, vec![q("2/25*sqrt(25/2)")]));
/// ```
pub fn rms_norm<T: Scalar>(
    shape: &[usize],
    normalized_ndim: usize,
    affine: Affine,
    convention: RmsConvention,
    inp: Inputs<'_, T>,
) -> Result<Forward<T>, SpecError> {
    let g = Grouping::last(shape, normalized_ndim)?;
    normalize(&g, &rms_norm_kind(affine, convention)?, inp)
}

/// **F4 `rms_norm_backward`** — the VJP of F3, closed form with two terms: per row, with
/// `g = dy·w`, `dx = rstd·(g − xhat·mean(g·xhat))`; `dgamma_j = Σ_rows dy·xhat` in either
/// convention (`∂y/∂gamma = xhat`); no `dbeta`. Must equal `Jᵀdy` of F3 exactly (tested).
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::exact::roots::parse_sum_of_roots;
/// use bnconf_spec::family::{rms_norm_backward, Affine, Inputs, RmsConvention};
/// let q = |s: &str| parse_exact(s).unwrap();
/// let (x, dy, gamma) = ([q("3"), q("4")], [q("1"), q("0")], [q("1"), q("1")]);
/// let eps = q("0");
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: None, eps: &eps };
/// let b = rms_norm_backward(&[1, 2], 1, Affine::Weight, RmsConvention::Standard, inp, &dy)
///     .unwrap();
/// // q = 25/2 as in F3; dx = (16/125·sqrt 2, −12/125·sqrt 2) in the field of q
/// assert_eq!(b.dx, [q("32/625*sqrt(25/2)"), q("-24/625*sqrt(25/2)")]);
/// let dgamma = b.dgamma.unwrap();
/// assert_eq!(dgamma[0].to_string(), "0 + 6/25*sqrt(25/2)");
/// assert_eq!(dgamma[0], parse_sum_of_roots("3/5*sqrt(2)").unwrap()); // equal values
/// assert_eq!(dgamma[1].to_string(), "0");
/// assert_eq!(b.dbeta, None);
/// ```
pub fn rms_norm_backward(
    shape: &[usize],
    normalized_ndim: usize,
    affine: Affine,
    convention: RmsConvention,
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
) -> Result<Backward, SpecError> {
    let g = Grouping::last(shape, normalized_ndim)?;
    normalize_backward(&g, &rms_norm_kind(affine, convention)?, inp, dy)
}

/// **F5 `group_norm`** — on a channel layout with `groups = G` (G divides C): group (n, g)
/// holds channels `g·C/G … (g+1)·C/G − 1` of sample n, every spatial cell of them, and is
/// normalized as F1 normalizes a row; `gamma`, `beta` per channel. Outputs `y`, and `mean`,
/// `rstd` of shape `[N, G]` (group `n·G + g`). InstanceNorm is `G = C`. (C1)–(C3).
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::family::{group_norm, Affine, ChannelLayout, Inputs};
/// let q = |s: &str| parse_exact(s).unwrap();
/// let (x, gamma, beta) = ([q("1"), q("3")], [q("1"), q("1")], [q("0"), q("5")]);
/// let eps = q("1");
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: Some(&beta), eps: &eps };
/// // [N, C, H, W] = [1, 2, 1, 1], G = 1: one group {1, 3}, q = 1 + 1 = 2
/// let f = group_norm(ChannelLayout::Nchw, &[1, 2, 1, 1], 1, Affine::WeightBias, inp).unwrap();
/// assert_eq!(f.y, [q("-1/2*sqrt(2)"), q("5 + 1/2*sqrt(2)")]);
/// // G = C (InstanceNorm): one cell per group, xhat = 0, y = beta
/// let f = group_norm(ChannelLayout::Nchw, &[1, 2, 1, 1], 2, Affine::WeightBias, inp).unwrap();
/// assert_eq!((f.y, f.mean), (vec![q("0"), q("5")], Some(vec![q("1"), q("3")])));
/// ```
pub fn group_norm<T: Scalar>(
    layout: ChannelLayout,
    shape: &[usize],
    groups: usize,
    affine: Affine,
    inp: Inputs<'_, T>,
) -> Result<Forward<T>, SpecError> {
    let g = Grouping::group_norm(layout, shape, groups)?;
    normalize(&g, &group_norm_kind(affine), inp)
}

/// **F6 `group_norm_backward`** — the VJP of F5, closed form of F2 per group (with
/// `g = dy·gamma_channel`); `dgamma_c = Σ dy·xhat` and `dbeta_c = Σ dy` over every sample and
/// spatial cell of channel c. Must equal `Jᵀdy` of F5 exactly (tested).
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::family::{group_norm_backward, Affine, ChannelLayout, Inputs};
/// let q = |s: &str| parse_exact(s).unwrap();
/// let (x, dy, gamma) = ([q("1"), q("3")], [q("1"), q("0")], [q("1"), q("1")]);
/// let eps = q("1");
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: None, eps: &eps };
/// let b = group_norm_backward(ChannelLayout::Nchw, &[1, 2, 1, 1], 1, Affine::WeightBias, inp,
///     &dy).unwrap();
/// let dgamma: Vec<String> = b.dgamma.unwrap().iter().map(|v| v.to_string()).collect();
/// assert_eq!(dgamma, ["0 + -1/2*sqrt(2)", "0"]);
/// assert_eq!(b.dbeta, Some(vec![q("1"), q("0")]));
/// ```
pub fn group_norm_backward(
    layout: ChannelLayout,
    shape: &[usize],
    groups: usize,
    affine: Affine,
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
) -> Result<Backward, SpecError> {
    let g = Grouping::group_norm(layout, shape, groups)?;
    normalize_backward(&g, &group_norm_kind(affine), inp, dy)
}

/// **F7 `batch_norm` on a channel layout** (`nchw`, `nhwc`, and FORMAT.md's new `nc`, `ncl`,
/// `ncdhw`, `ndhwc`): channel c normalized over every cell whose channel index is c (all
/// samples, all spatial cells), with its own `gamma_c`, `beta_c` — S25 on `nchw`. Outputs `y`,
/// and per channel `mean`, `rstd`. (C1)–(C3).
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::family::{batch_norm, ChannelLayout, Inputs};
/// let q = |s: &str| parse_exact(s).unwrap();
/// // [N, C] = [2, 1] (BatchNorm1d): channel 0 = {1, 3}
/// let (x, gamma, beta, eps) = ([q("1"), q("3")], [q("1")], [q("0")], q("0"));
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: Some(&beta), eps: &eps };
/// let f = batch_norm(ChannelLayout::Nc, &[2, 1], inp).unwrap();
/// assert_eq!(f.y, [q("-1"), q("1")]);
/// ```
pub fn batch_norm<T: Scalar>(
    layout: ChannelLayout,
    shape: &[usize],
    inp: Inputs<'_, T>,
) -> Result<Forward<T>, SpecError> {
    let g = Grouping::batch_norm(layout, shape)?;
    normalize(&g, &batch_norm_kind(), inp)
}

/// **F8 `batch_norm` backward on a channel layout** — the VJP of F7: S6's three-term form per
/// channel, `dgamma_c = Σ dy·xhat` (one radicand per channel: a one-term sum, which prints
/// as the seed's `A + B*sqrt(D)`), `dbeta_c = Σ dy` — S28 on `nchw`.
///
/// ```
/// use bnconf_spec::exact::parse::parse_exact;
/// use bnconf_spec::family::{batch_norm_backward, ChannelLayout, Inputs};
/// let q = |s: &str| parse_exact(s).unwrap();
/// let (x, dy, gamma, eps) = ([q("1"), q("3")], [q("1"), q("0")], [q("1")], q("1"));
/// let inp = Inputs { x: &x, gamma: Some(&gamma), beta: None, eps: &eps };
/// let b = batch_norm_backward(ChannelLayout::Nc, &[2, 1], inp, &dy).unwrap();
/// assert_eq!(b.dgamma.unwrap()[0].to_string(), "0 + -1/2*sqrt(2)");
/// assert_eq!(b.dbeta, Some(vec![q("1")]));
/// ```
pub fn batch_norm_backward(
    layout: ChannelLayout,
    shape: &[usize],
    inp: Inputs<'_, QSqrt>,
    dy: &[QSqrt],
) -> Result<Backward, SpecError> {
    let g = Grouping::batch_norm(layout, shape)?;
    normalize_backward(&g, &batch_norm_kind(), inp, dy)
}
