//! The family's kernels: good ones first (per family: `ln-`, `rms-`, `gn-`), then the
//! known-bad negative controls, one per bug shape of DESIGN §9.

use super::driver::{FamilyRecipe, Flaw};
use super::kernel::FamilyKernel;
use super::vocab::{Family, FamilyOp};
use crate::stats::Moments;
use crate::Expected;

/// Chunk length of the Welford kernels (small, so moderate rows already exercise the merge).
const WELFORD_CHUNK: usize = 16;

const LN: &[FamilyOp] = &[FamilyOp::LayerNorm, FamilyOp::LayerNormBackward];
const RMS: &[FamilyOp] = &[FamilyOp::RmsNorm, FamilyOp::RmsNormBackward];
const GN: &[FamilyOp] = &[FamilyOp::GroupNorm, FamilyOp::GroupNormBackward];

/// The reference recipe of a family: two-pass, pairwise sums in the working precision.
const fn twopass(name: &'static str, description: &'static str, family: Family) -> FamilyRecipe {
    FamilyRecipe {
        name,
        description,
        family,
        expected: Expected::Good,
        moments: Moments::TwoPass,
        half_storage: false,
        stats_out: true,
        flaw: None,
        defective_ops: &[],
        scaled: false,
    }
}

/// A known-bad variant of a family's two-pass recipe.
const fn bad(
    name: &'static str,
    description: &'static str,
    family: Family,
    flaw: Flaw,
    defective_ops: &'static [FamilyOp],
) -> FamilyRecipe {
    FamilyRecipe {
        expected: Expected::KnownBad,
        flaw: Some(flaw),
        defective_ops,
        ..twopass(name, description, family)
    }
}

/// The range-robust variant of a family's two-pass recipe ([`FamilyRecipe::scaled`]).
const fn scaled(name: &'static str, description: &'static str, family: Family) -> FamilyRecipe {
    FamilyRecipe {
        scaled: true,
        ..twopass(name, description, family)
    }
}

fn recipes() -> Vec<FamilyRecipe> {
    let half = |name, description, family| FamilyRecipe {
        half_storage: true,
        stats_out: false,
        ..twopass(name, description, family)
    };
    vec![
        twopass(
            "ln-twopass",
            "LayerNorm, two-pass per row: mean = Σx/K, then var = Σ(x−mean)²/K, sums pairwise, \
             in the working precision (f64 for f64 data, f32 otherwise: f32 accumulation for \
             f16/bf16); backward in the closed three-term form, dgamma/dbeta summed over every \
             row. Outputs rounded to their dtype.",
            Family::LayerNorm,
        ),
        FamilyRecipe {
            moments: Moments::Welford {
                chunk: WELFORD_CHUNK,
            },
            ..twopass(
                "ln-welford",
                "LayerNorm with Welford's update over chunks of 16 cells of a row, chunks \
                 merged as a balanced tree with Chan's formula, in the working precision; \
                 backward as ln-twopass.",
                Family::LayerNorm,
            )
        },
        half(
            "ln-half-f32acc",
            "LayerNorm keeping per-cell intermediates (xhat, dy·gamma) in the storage type \
             (f16/bf16 activations stay half) while every sum accumulates in f32; returns y \
             only (no mean, rstd).",
            Family::LayerNorm,
        ),
        scaled(
            "ln-scaled",
            "LayerNorm, range-robust: each row scaled by the power of two that brings its \
             largest |x| into [1, 2) (exact) before the two-pass statistics, rstd scaled back, \
             so squares never overflow or underflow; otherwise ln-twopass.",
            Family::LayerNorm,
        ),
        twopass(
            "rms-twopass",
            "RMSNorm: Σx²/K summed pairwise in the working precision (f64 for f64 data, f32 \
             otherwise), rstd = 1/sqrt(Σx²/K + eps), y = w·x·rstd with w = gamma or 1 + gamma \
             (offset); backward in the closed two-term form, dgamma summed over every row.",
            Family::RmsNorm,
        ),
        half(
            "rms-half-f32acc",
            "RMSNorm keeping per-cell intermediates (xhat, dy·w) in the storage type while \
             Σx² and the backward's sums accumulate in f32; returns y only (no rstd).",
            Family::RmsNorm,
        ),
        scaled(
            "rms-scaled",
            "RMSNorm, range-robust: Σx² of each row scaled by a power of two (largest |x| in \
             [1, 2)), rstd scaled back; otherwise rms-twopass.",
            Family::RmsNorm,
        ),
        twopass(
            "gn-twopass",
            "GroupNorm (InstanceNorm at groups = C) on every channel layout: each (sample, \
             group) two-pass over its channels' cells, pairwise sums in the working precision; \
             backward three-term per group, dgamma/dbeta per channel over every sample and \
             spatial cell.",
            Family::GroupNorm,
        ),
        half(
            "gn-half-f32acc",
            "GroupNorm keeping per-cell intermediates (xhat, dy·gamma) in the storage type while \
             every sum accumulates in f32; returns y only (no mean, rstd).",
            Family::GroupNorm,
        ),
        scaled(
            "gn-scaled",
            "GroupNorm, range-robust: each (sample, group) scaled by a power of two (largest |x| \
             in [1, 2)) before the two-pass statistics, rstd scaled back; otherwise gn-twopass.",
            Family::GroupNorm,
        ),
        bad(
            "bad-ln-onepass",
            "KNOWN BAD: LayerNorm variance one-pass, var = max(E[x²] − mean², 0) in the \
             working precision (as reported for ONNX Runtime's CPU LayerNormalization): \
             catastrophic cancellation on rows whose mean is large against their spread.",
            Family::LayerNorm,
            Flaw::OnePass,
            LN,
        ),
        bad(
            "bad-ln-backward-onepass",
            "KNOWN BAD: LayerNorm forward two-pass, but the backward recomputes the variance \
             one-pass, var = max(E[x²] − mean², 0) (as MLX's fast.layer_norm fallback): wrong \
             dx and dgamma on rows with a large mean.",
            Family::LayerNorm,
            Flaw::BackwardOnePass,
            &[FamilyOp::LayerNormBackward],
        ),
        FamilyRecipe {
            half_storage: true,
            stats_out: false,
            ..bad(
                "bad-ln-half-xhat-dgamma",
                "KNOWN BAD (mixed precision): LayerNorm backward that sums dgamma from xhat kept \
                 in the half activation type (as a memory-saving backward recomputing xhat from \
                 the half y), so the f32 dgamma carries the half type's rounding; otherwise as \
                 ln-half-f32acc. Its defect shows in f16+f32 and bf16+f32 only.",
                Family::LayerNorm,
                Flaw::HalfXhatDgamma,
                &[FamilyOp::LayerNormBackward],
            )
        },
        bad(
            "bad-ln-half-param-sums",
            "KNOWN BAD (mixed precision): LayerNorm backward whose dgamma and dbeta (f32 \
             outputs in f16+f32 and bf16+f32) are summed over the rows left to right with the \
             accumulator stored in the half activation type after every addition (as PyTorch \
             2.15's CPU layer_norm backward with half input and float32 weights); otherwise as \
             ln-twopass. Its defect is held in f16+f32 and bf16+f32.",
            Family::LayerNorm,
            Flaw::HalfParamSums,
            &[FamilyOp::LayerNormBackward],
        ),
        bad(
            "bad-ln-half-rstd-dgamma",
            "KNOWN BAD (mixed precision): LayerNorm backward whose f32 dgamma is summed from \
             xhat = (x − mean)·rstd with mean and rstd rounded to the half activation type (as \
             torch.compile's Inductor backward in PyTorch 2.15, which keeps the recomputed \
             statistics in the input's dtype); otherwise as ln-twopass. Its defect is held in \
             f16+f32 and bf16+f32.",
            Family::LayerNorm,
            Flaw::HalfRstdDgamma,
            &[FamilyOp::LayerNormBackward],
        ),
        bad(
            "bad-ln-no-eps",
            "KNOWN BAD: LayerNorm with rstd = 1/sqrt(var): eps dropped (wrong once var is not \
             large against eps; infinite on constant rows).",
            Family::LayerNorm,
            Flaw::NoEps,
            LN,
        ),
        bad(
            "bad-ln-eps-outside-sqrt",
            "KNOWN BAD: LayerNorm with rstd = 1/(sqrt(var) + eps): eps added outside the \
             square root.",
            Family::LayerNorm,
            Flaw::EpsOutsideSqrt,
            LN,
        ),
        bad(
            "bad-ln-backward-one-axis",
            "KNOWN BAD: LayerNorm backward that normalises over the last axis only (each row of \
             the last extent its own group) when normalized_ndim > 1; gamma indexed correctly, \
             forward correct.",
            Family::LayerNorm,
            Flaw::BackwardOneAxis,
            &[FamilyOp::LayerNormBackward],
        ),
        bad(
            "bad-rms-bf16-dgamma",
            "KNOWN BAD: RMSNorm backward whose dgamma is reduced across rows in bf16 (the \
             accumulator rounded to bf16 after every addition, as reported for Liger-Kernel).",
            Family::RmsNorm,
            Flaw::DgammaBf16,
            &[FamilyOp::RmsNormBackward],
        ),
        bad(
            "bad-rms-f16-sumsq-overflow",
            "KNOWN BAD: RMSNorm on f16 data accumulates Σx² in f16: it overflows to infinity \
             once a cell has |x| ≥ 256 (rstd becomes 0) and loses precision on long rows; \
             other dtypes as rms-twopass.",
            Family::RmsNorm,
            Flaw::SumSqF16,
            RMS,
        ),
        bad(
            "bad-rms-offset-ignored",
            "KNOWN BAD: RMSNorm that ignores the offset convention: y = gamma·xhat (and the \
             backward's weight gamma) where the case asks for (1 + gamma).",
            Family::RmsNorm,
            Flaw::OffsetIgnored,
            RMS,
        ),
        bad(
            "bad-gn-pow2-groups",
            "KNOWN BAD: GroupNorm that finds a channel's group by a shift, c >> log2(C/G) with \
             C/G rounded down to a power of two (clamped to the last group): wrong groups when \
             C/G is not a power of two.",
            Family::GroupNorm,
            Flaw::Pow2Groups,
            GN,
        ),
        bad(
            "bad-gn-onepass",
            "KNOWN BAD: GroupNorm variance one-pass, var = max(E[x²] − mean², 0) in the working \
             precision (as ONNX's function body for GroupNormalization-21, which ONNX Runtime \
             runs): catastrophic cancellation on groups whose mean is large against their \
             spread.",
            Family::GroupNorm,
            Flaw::OnePass,
            GN,
        ),
        bad(
            "bad-gn-half-rstd-dgamma",
            "KNOWN BAD (mixed precision): GroupNorm backward whose f32 dgamma is summed from \
             xhat = (x − mean)·rstd with mean and rstd rounded to the half activation type (as \
             torch.compile's Inductor backward in PyTorch 2.15); otherwise as gn-twopass. Its \
             defect is held in f16+f32 and bf16+f32.",
            Family::GroupNorm,
            Flaw::HalfRstdDgamma,
            &[FamilyOp::GroupNormBackward],
        ),
        bad(
            "bad-gn-channels-last",
            "KNOWN BAD: GroupNorm that indexes channels-last data (nhwc, ndhwc) as if \
             channels-first, (n·C + c)·S + s: wrong groups and gamma on every channels-last \
             case with C > 1 and more than one spatial cell.",
            Family::GroupNorm,
            Flaw::ChannelsLastAsNchw,
            GN,
        ),
        bad(
            "bad-ln-f32-compute",
            "KNOWN BAD (f64 only): LayerNorm computing f64 data in f32: x, dy, gamma, beta and \
             eps rounded to f32, statistics, normalization, affine and backward in f32, the \
             results widened to f64 (as MLX 0.32.4's CPU fallback for float64 \
             mx.fast.layer_norm, which casts x to float32). In f32, f16, bf16 and the mixed \
             precisions f32 is already the working precision: there it is ln-twopass, and its \
             defect is held in f64 only.",
            Family::LayerNorm,
            Flaw::F32Compute,
            LN,
        ),
        bad(
            "bad-rms-f32-compute",
            "KNOWN BAD (f64 only): RMSNorm computing f64 data in f32: x, dy, gamma and eps \
             rounded to f32, Σx², rstd, y and the backward in f32, the results widened to f64 \
             (as MLX 0.32.4's CPU fallback for float64 mx.fast.rms_norm). In f32, f16, bf16 and \
             the mixed precisions it is rms-twopass; its defect is held in f64 only.",
            Family::RmsNorm,
            Flaw::F32Compute,
            RMS,
        ),
        bad(
            "bad-gn-f32-compute",
            "KNOWN BAD (f64 only): GroupNorm computing f64 data in f32: x, dy, gamma, beta and \
             eps rounded to f32, statistics, normalization, affine and backward in f32, the \
             results widened to f64 (as MLX 0.32.4's nn.GroupNorm(pytorch_compatible=True) on \
             float64, which normalizes through mx.fast.layer_norm). In f32, f16, bf16 and the \
             mixed precisions it is gn-twopass; its defect is held in f64 only.",
            Family::GroupNorm,
            Flaw::F32Compute,
            GN,
        ),
        bad(
            "bad-ln-eps-f32",
            "KNOWN BAD (f64 only): LayerNorm on f64 data with eps rounded to f32 (an f32 epsilon \
             parameter or attribute; everything else in f64), as candle-nn 0.11.1's \
             ops::layer_norm_slow(x, gamma, beta, eps as f32), ONNX's float epsilon attribute \
             and Paddle's float epsilon. In f32, f16, bf16 and the mixed precisions eps is \
             already an f32: there it is ln-twopass, and its defect is held in f64 only.",
            Family::LayerNorm,
            Flaw::EpsF32,
            LN,
        ),
        bad(
            "bad-rms-eps-f32",
            "KNOWN BAD (f64 only): RMSNorm on f64 data with eps rounded to f32 (an f32 epsilon \
             parameter or attribute; everything else in f64). In f32, f16, bf16 and the mixed \
             precisions it is rms-twopass; its defect is held in f64 only.",
            Family::RmsNorm,
            Flaw::EpsF32,
            RMS,
        ),
        bad(
            "bad-rms-f32-inputs",
            "KNOWN BAD (f64 only): RMSNorm on f64 data with x and gamma rounded to f32 and the \
             mean square summed in f32; eps, the reciprocal square root and the products in \
             f64 (as Apache TVM 0.27's topi.nn.rms_norm, which casts data and weight to \
             float32 whatever their dtype). In f32, f16, bf16 and the mixed precisions it is \
             rms-twopass; its defect is held in f64 only.",
            Family::RmsNorm,
            Flaw::F32InputsRms,
            RMS,
        ),
        bad(
            "bad-rms-f32-rms",
            "KNOWN BAD (f64 only): RMSNorm on f64 data with the rms sqrt(mean(x²) + eps) \
             computed in f32 (x and eps rounded to f32) and widened, the rest in f64 (as \
             burn-nn 0.22.1's RmsNorm::forward, which casts x to f32 for the rms). In f32, \
             f16, bf16 and the mixed precisions it is rms-twopass; its defect is held in f64 \
             only.",
            Family::RmsNorm,
            Flaw::F32Rms,
            RMS,
        ),
        bad(
            "bad-gn-eps-f32",
            "KNOWN BAD (f64 only): GroupNorm on f64 data with eps rounded to f32 (an f32 epsilon \
             parameter or attribute, as ONNX's GroupNormalization and Paddle's group_norm; \
             everything else in f64). In f32, f16, bf16 and the mixed precisions it is \
             gn-twopass; its defect is held in f64 only.",
            Family::GroupNorm,
            Flaw::EpsF32,
            GN,
        ),
        bad(
            "bad-ln-var-doubled",
            "KNOWN BAD (sharpness control): LayerNorm with the variance doubled, rstd = \
             1/sqrt(2·var + eps). Every case that gates must reject it where it changes the \
             answer beyond rounding.",
            Family::LayerNorm,
            Flaw::VarDoubled,
            LN,
        ),
        bad(
            "bad-ln-rstd-off25",
            "KNOWN BAD (sharpness control): LayerNorm with rstd 25 % too large.",
            Family::LayerNorm,
            Flaw::RstdOff25,
            LN,
        ),
        bad(
            "bad-rms-ms-doubled",
            "KNOWN BAD (sharpness control): RMSNorm with the mean square doubled, rstd = \
             1/sqrt(2·Σx²/K + eps).",
            Family::RmsNorm,
            Flaw::VarDoubled,
            RMS,
        ),
        bad(
            "bad-rms-rstd-off25",
            "KNOWN BAD (sharpness control): RMSNorm with rstd 25 % too large.",
            Family::RmsNorm,
            Flaw::RstdOff25,
            RMS,
        ),
        bad(
            "bad-gn-var-doubled",
            "KNOWN BAD (sharpness control): GroupNorm with the variance doubled, rstd = \
             1/sqrt(2·var + eps).",
            Family::GroupNorm,
            Flaw::VarDoubled,
            GN,
        ),
        bad(
            "bad-gn-rstd-off25",
            "KNOWN BAD (sharpness control): GroupNorm with rstd 25 % too large.",
            Family::GroupNorm,
            Flaw::RstdOff25,
            GN,
        ),
    ]
}

/// Every built-in family kernel in a fixed order: good ones first, then the known-bad ones.
pub fn all_family_kernels() -> Vec<Box<dyn FamilyKernel>> {
    recipes()
        .into_iter()
        .map(|r| Box::new(r) as Box<dyn FamilyKernel>)
        .collect()
}

/// The family kernel of that name.
pub fn family_kernel_by_name(name: &str) -> Option<Box<dyn FamilyKernel>> {
    all_family_kernels().into_iter().find(|k| k.name() == name)
}

/// The built-in kernels of one family, in [`all_family_kernels`]' order.
pub fn family_kernels(family: Family) -> Vec<Box<dyn FamilyKernel>> {
    all_family_kernels()
        .into_iter()
        .filter(|k| k.family() == family)
        .collect()
}
