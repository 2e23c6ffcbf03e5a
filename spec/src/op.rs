//! The ops of FORMAT.md (op × layout), evaluated exactly: the bridge into the matrix view,
//! the per-row lift (S1) of the one-channel op, the bridge back.

use crate::channel as ch;
use crate::error::SpecError;
use crate::exact::{QSqrt, Rational};
use crate::layout::Geometry;
use crate::num::Scalar;
use std::collections::BTreeMap;

/// An op of FORMAT.md. Each variant is specified in the StableHLO style: semantics,
/// inputs, outputs, numbered constraints (errors cite them), and an exact example that runs
/// as a doctest. Per channel `c` over its `m` cells; `r = (var + eps)^(-1/2)`, `xhat = (x − mean)·r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// **forward** — training BN (seed S2 `bnPerChannel` on rows, S4 on flat, S18 on chw,
    /// S25 `bnBatchTensor4` on nchw; nhwc by the channels-last bridge).
    ///
    /// *Semantics*: `mean = Σx/m`, `var = Σ(x − mean)²/m` (biased), `y = gamma·xhat + beta`.
    /// *Inputs*: `x` (layout shape), `gamma`, `beta` (`[C]`), `eps ≥ 0`.
    /// *Outputs*: `y` (layout shape), `mean`, `var` (`[C]`); `y ∈ Q(sqrt(q))`, the others rational.
    /// *Constraints*: (C1) `var + eps > 0` per channel; (C2) input lengths match the shape;
    /// (C3) the shape fits the layout, has no zero extent and does not overflow.
    ///
    /// *Example* (`x = [1, 2, 3, 4]`, one channel, eps 0: mean 5/2, var 5/4, `q = 5/4`):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs = [("x", v(&["1", "2", "3", "4"])), ("gamma", v(&["1"])), ("beta", v(&["0"]))]
    ///     .into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let p = Problem::new(Op::Forward, Geometry::new(Layout::Rows, &[1, 4], 64).unwrap(), bnconf_spec::Rational::from_integer(0.into()), inputs).unwrap();
    /// let out = p.evaluate().unwrap();
    /// assert_eq!(out["y"][0].to_string(), "0 + -6/5*sqrt(5/4)"); // (1 − 5/2)/sqrt(5/4)
    /// assert_eq!(out["var"][0].to_string(), "5/4");
    /// ```
    Forward,
    /// **backward** — the VJP of forward's `y` in closed form (S6 `bnPerChannel_grad_input`,
    /// S15 dγ, S16 dβ; S20 on chw; S28 on nchw). Proven equal to `J^T dy` of forward (S3/S5/S19/S27),
    /// which the property tests check exactly.
    ///
    /// *Semantics*: `dx = gamma·r·(dy − mean(dy) − xhat·mean(dy·xhat))`, `dgamma = Σ dy·xhat`,
    /// `dbeta = Σ dy`. *Inputs*: `x`, `dy` (layout shape), `gamma` (`[C]`), `eps`.
    /// *Outputs*: `dx` (layout shape), `dgamma`, `dbeta` (`[C]`). *Constraints*: (C1)–(C3).
    ///
    /// *Example* (`x = [0, 2]`, `dy = [1, 0]`, eps 0: r = 1, xhat = [−1, 1]):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs = [("x", v(&["0", "2"])), ("dy", v(&["1", "0"])), ("gamma", v(&["3"]))]
    ///     .into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let p = Problem::new(Op::Backward, Geometry::new(Layout::Nchw, &[2, 1, 1, 1], 64).unwrap(), bnconf_spec::Rational::from_integer(0.into()), inputs).unwrap();
    /// let out = p.evaluate().unwrap();
    /// assert_eq!((out["dx"][0].to_string(), out["dgamma"][0].to_string(), out["dbeta"][0].to_string()),
    ///            ("0".into(), "-1".into(), "1".into()));
    /// ```
    Backward,
    /// **eval** — inference BN with frozen statistics (S11 `bnEval` per channel, S12 rows,
    /// S13 flat, S14 chw through the reassoc bridge).
    ///
    /// *Semantics*: `y = gamma·(x − mean)·(var + eps)^(−1/2) + beta` with `mean`, `var` handed in.
    /// *Inputs*: `x`, `gamma`, `beta`, `mean`, `var`, `eps`. *Outputs*: `y`.
    /// *Constraints*: (C1) handed-in `var + eps > 0` (a negative `var` is accepted if this
    /// holds), (C2), (C3).
    ///
    /// *Example* (mean 1, var 3, eps 1: `r = 1/2`):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs = [("x", v(&["5"])), ("gamma", v(&["2"])), ("beta", v(&["1/2"])), ("mean", v(&["1"])), ("var", v(&["3"]))]
    ///     .into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let p = Problem::new(Op::Eval, Geometry::new(Layout::Chw, &[1, 1, 1], 64).unwrap(), bnconf_spec::Rational::from_integer(1.into()), inputs).unwrap();
    /// assert_eq!(p.evaluate().unwrap()["y"][0].to_string(), "9/2"); // 2·4·(1/2) + 1/2
    /// ```
    Eval,
    /// **sync_forward** — sync BN with the all-reduced `mean` and second moment `m2` handed in
    /// (S26 `syncBnBatchTensor4`); `var = m2 − mean²` is formed by the op (E[x²] of a union of
    /// equal shards is the mean of the shards' E[x²]; variances do not average).
    ///
    /// *Semantics*: eval with `var = m2 − mean²`. *Inputs*: `x`, `gamma`, `beta`, `mean`, `m2`,
    /// `eps`. *Outputs*: `y`. *Constraints*: (C1) `m2 − mean² + eps > 0`, (C2), (C3).
    ///
    /// *Example* (mean 1, m2 2, eps 1: `q = 2`):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs = [("x", v(&["3"])), ("gamma", v(&["1"])), ("beta", v(&["0"])), ("mean", v(&["1"])), ("m2", v(&["2"]))]
    ///     .into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let p = Problem::new(Op::SyncForward, Geometry::new(Layout::Nhwc, &[1, 1, 1, 1], 64).unwrap(), bnconf_spec::Rational::from_integer(1.into()), inputs).unwrap();
    /// assert_eq!(p.evaluate().unwrap()["y"][0].to_string(), "0 + 1*sqrt(2)"); // 2/sqrt(2)
    /// ```
    SyncForward,
    /// **sync_backward** — the sync input-VJP with the four all-reduced statistics handed in
    /// (S29 flat, S30 dγ at the handed-in statistics, S31 on nchw).
    ///
    /// *Semantics*: `dx = gamma·r·(dy − mean_dy − xhat·mean_dy_xhat)` with
    /// `r = (m2 − mean² + eps)^(−1/2)`; `dgamma = Σ dy·xhat` at that xhat (this shard's part of
    /// the global sum); `dbeta = Σ dy`. *Inputs*: `x`, `dy`, `gamma`, `mean`, `m2`, `mean_dy`,
    /// `mean_dy_xhat` (may be irrational: it lies in Q(sqrt(q)) of its channel), `eps`.
    /// *Outputs*: `dx`, `dgamma`, `dbeta`. *Constraints*: (C1) `m2 − mean² + eps > 0`, (C2),
    /// (C3), (C4) `mean_dy_xhat ∈ Q(sqrt(q))` of its channel (`SpecError::NotInField`).
    ///
    /// *Example* (q = 2, `mean_dy_xhat = 1/4 + sqrt(8)`):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs = [("x", v(&["1", "3"])), ("dy", v(&["1", "-1"])), ("gamma", v(&["2"])), ("mean", v(&["1"])),
    ///     ("m2", v(&["2"])), ("mean_dy", v(&["1/2"])), ("mean_dy_xhat", v(&["1/4 + 1*sqrt(8)"]))]
    ///     .into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let p = Problem::new(Op::SyncBackward, Geometry::new(Layout::Flat, &[1, 2], 64).unwrap(), bnconf_spec::Rational::from_integer(1.into()), inputs).unwrap();
    /// let out = p.evaluate().unwrap();
    /// assert_eq!(out["dx"][1].to_string(), "-1/2 + -11/2*sqrt(2)");
    /// assert_eq!(out["dgamma"][0].to_string(), "0 + -1*sqrt(2)");
    /// ```
    SyncBackward,
    /// **running_update** — one update of the running statistics from a training batch
    /// (beyond the seed: what frameworks do around [`Op::Forward`]; issue 8).
    ///
    /// *Semantics*: with the batch statistics `mean = Σx/m`, `var = Σ(x − mean)²/m` and
    /// momentum `a` ([`Params::momentum`]), per [`Convention`]:
    /// `pytorch`: `new_mean = (1 − a)·running_mean + a·mean`,
    /// `new_var = (1 − a)·running_var + a·var·m/(m − 1)` (unbiased; the factor is **1 when
    /// m = 1**, as TensorFlow's fused batch norm divides by `max(m − 1, 1)`: PyTorch itself
    /// refuses m = 1 in training);
    /// `onnx` (also Keras, Flax, `tf.keras`): `new_mean = a·running_mean + (1 − a)·mean`,
    /// `new_var = a·running_var + (1 − a)·var` (biased). `eps` is not used.
    /// *Inputs*: `x` (layout shape), `running_mean`, `running_var` (`[C]`), `momentum`,
    /// `convention`. *Outputs*: `new_mean`, `new_var` (`[C]`), rational.
    /// *Constraints*: (C2), (C3), (C7) `0 ≤ momentum ≤ 1`, exact as written (a perturbed input
    /// of the budget like the others: a kernel may hold it in its dtype).
    ///
    /// *Example* (`x = [1, 3]`: mean 2, var 1, m = 2; running 0 and 1; a = 1/10):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// # use bnconf_spec::op::{Convention, Params};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs: std::collections::BTreeMap<String, Vec<bnconf_spec::QSqrt>> =
    ///     [("x", v(&["1", "3"])), ("running_mean", v(&["0"])), ("running_var", v(&["1"]))]
    ///     .into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let g = Geometry::new(Layout::Rows, &[1, 2], 64).unwrap();
    /// let a = bnconf_spec::exact::parse::parse_rational("0.1").unwrap();
    /// let run = |conv| {
    ///     let params = Params { momentum: Some(a.clone()), convention: Some(conv) };
    ///     let p = Problem::new_with_params(Op::RunningUpdate, g.clone(), bnconf_spec::Rational::from_integer(0.into()), inputs.clone(), params).unwrap();
    ///     let out = p.evaluate().unwrap();
    ///     (out["new_mean"][0].to_string(), out["new_var"][0].to_string())
    /// };
    /// assert_eq!(run(Convention::Pytorch), ("1/5".into(), "11/10".into())); // 0.9·1 + 0.1·1·2/1
    /// assert_eq!(run(Convention::Onnx), ("9/5".into(), "1".into()));       // 0.1·1 + 0.9·1
    /// ```
    RunningUpdate,
    /// **sync_stats** — the all-reduce of sync BN across R shards with **unequal** cell counts
    /// (beyond the seed, which all-reduces equal shards with a plain mean: the special case
    /// `n_r` all equal; issue 8).
    ///
    /// *Semantics*: per channel, `N = Σ n_r`, `mean = Σ n_r·shard_mean_r / N`,
    /// `m2 = Σ n_r·shard_m2_r / N` (`shard_m2_r` = E[x²] of shard r), `var = m2 − mean²`
    /// (equal, exactly, to Chan's merge of the centred summaries, in any order, and to the
    /// statistics of the union of the shards' cells). A shard with `n_r = 0` contributes
    /// nothing, whatever its statistics (an empty replica reports stale or arbitrary values).
    /// *Inputs*: `shard_count` (`[R]`), `shard_mean`, `shard_m2` (`[C, R]`: layout `rows`, row c
    /// = channel c's per-shard values). *Outputs*: `mean`, `m2`, `var` (`[C]`), rational.
    /// *Constraints*: (C2), (C3), (C5) each `shard_count` is a non-negative integer,
    /// (C6) `Σ n_r > 0`, (C8) layout `rows`. `eps` is not used.
    ///
    /// *Example* (shards of 1, 3 and 0 cells: means 0, 4, 100; E[x²] 0, 20, 7):
    /// ```
    /// # use bnconf_spec::{exact::parse::parse_exact, Geometry, Layout, Op, Problem};
    /// let v = |xs: &[&str]| xs.iter().map(|s| parse_exact(s).unwrap()).collect::<Vec<_>>();
    /// let inputs = [("shard_count", v(&["1", "3", "0"])), ("shard_mean", v(&["0", "4", "100"])),
    ///     ("shard_m2", v(&["0", "20", "7"]))].into_iter().map(|(k, x)| (k.to_string(), x)).collect();
    /// let p = Problem::new(Op::SyncStats, Geometry::new(Layout::Rows, &[1, 3], 64).unwrap(), bnconf_spec::Rational::from_integer(0.into()), inputs).unwrap();
    /// let out = p.evaluate().unwrap();
    /// assert_eq!(out["mean"][0].to_string(), "3");  // (1·0 + 3·4)/4
    /// assert_eq!(out["m2"][0].to_string(), "15");   // (1·0 + 3·20)/4
    /// assert_eq!(out["var"][0].to_string(), "6");   // 15 − 9
    /// ```
    SyncStats,
}

/// The running-statistics convention of [`Op::RunningUpdate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Convention {
    /// `new = (1 − a)·old + a·batch`, running variance unbiased (`m/(m − 1)`; 1 at m = 1).
    Pytorch,
    /// `new = a·old + (1 − a)·batch`, biased (ONNX, Keras, Flax).
    Onnx,
}

impl Convention {
    /// Both conventions.
    pub const ALL: [Convention; 2] = [Convention::Pytorch, Convention::Onnx];
    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            Convention::Pytorch => "pytorch",
            Convention::Onnx => "onnx",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<Convention> {
        Convention::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// Scalar parameters besides `eps` (only [`Op::RunningUpdate`] takes any).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params {
    /// `momentum`, exact, in `[0, 1]`.
    pub momentum: Option<Rational>,
    /// The running-statistics convention.
    pub convention: Option<Convention>,
}

/// Whether a tensor has the layout's shape (a cell value per element) or shape `[C]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// One value per cell: the layout's shape.
    Cells,
    /// One value per channel: shape `[C]`.
    Channel,
    /// One value per shard, shared by every channel: shape `[R]` (`shard_count`; R is the
    /// row length of the `rows` layout).
    Shards,
}

impl Op {
    /// Every op.
    pub const ALL: [Op; 7] = [
        Op::Forward,
        Op::Backward,
        Op::Eval,
        Op::SyncForward,
        Op::SyncBackward,
        Op::RunningUpdate,
        Op::SyncStats,
    ];

    /// FORMAT.md's name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Forward => "forward",
            Op::Backward => "backward",
            Op::Eval => "eval",
            Op::SyncForward => "sync_forward",
            Op::SyncBackward => "sync_backward",
            Op::RunningUpdate => "running_update",
            Op::SyncStats => "sync_stats",
        }
    }
    /// Parse FORMAT.md's name.
    pub fn from_name(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == s)
    }
    /// Input names, in FORMAT.md's order.
    pub fn inputs(self) -> &'static [&'static str] {
        match self {
            Op::Forward => &["x", "gamma", "beta"],
            Op::Backward => &["x", "dy", "gamma"],
            Op::Eval => &["x", "gamma", "beta", "mean", "var"],
            Op::SyncForward => &["x", "gamma", "beta", "mean", "m2"],
            Op::SyncBackward => &["x", "dy", "gamma", "mean", "m2", "mean_dy", "mean_dy_xhat"],
            Op::RunningUpdate => &["x", "running_mean", "running_var"],
            Op::SyncStats => &["shard_count", "shard_mean", "shard_m2"],
        }
    }
    /// Output names, in FORMAT.md's order.
    pub fn outputs(self) -> &'static [&'static str] {
        match self {
            Op::Forward => &["y", "mean", "var"],
            Op::Backward | Op::SyncBackward => &["dx", "dgamma", "dbeta"],
            Op::Eval | Op::SyncForward => &["y"],
            Op::RunningUpdate => &["new_mean", "new_var"],
            Op::SyncStats => &["mean", "m2", "var"],
        }
    }
    /// Shape class of an input or output name.
    pub fn extent(name: &str) -> Extent {
        match name {
            "x" | "dy" | "y" | "dx" | "shard_mean" | "shard_m2" => Extent::Cells,
            "shard_count" => Extent::Shards,
            _ => Extent::Channel,
        }
    }
    /// The input whose length is the channel's number of cells (`x`, or `shard_mean`).
    pub fn cell_input(self) -> &'static str {
        match self {
            Op::SyncStats => "shard_mean",
            _ => "x",
        }
    }
    /// Whether the op uses `eps` (the statistics ops do not).
    pub fn uses_eps(self) -> bool {
        !matches!(self, Op::RunningUpdate | Op::SyncStats)
    }
}

/// One channel's inputs. Cell inputs (`x`, `dy`) hold the channel's m cells in matrix-view
/// order; per-channel inputs a single value. Inputs the op does not take are absent.
#[derive(Clone, Debug)]
pub struct ChannelIn<T> {
    /// Named inputs, each a vector (length m for cells, 1 for per-channel values, R for
    /// `shard_count`); `momentum`, when the op takes it, is here as a length-1 input (it is
    /// perturbed like the others in the budget's condition number).
    pub values: BTreeMap<&'static str, Vec<T>>,
    /// The convention of [`Op::RunningUpdate`].
    pub convention: Option<Convention>,
}

impl<T: Scalar> ChannelIn<T> {
    fn cells(&self, k: &str) -> &[T] {
        &self.values[k]
    }
    fn one(&self, k: &str) -> &T {
        &self.values[k][0]
    }
}

fn check_c1<T: Scalar>(
    channel: usize,
    what: &'static str,
    var: &T,
    eps: &T,
) -> Result<(), SpecError> {
    let q = var.value().clone() + eps.value().clone();
    if q.signum() <= 0 {
        return Err(SpecError::NonPositiveVariance {
            channel,
            what,
            value: q.to_string(),
        });
    }
    Ok(())
}

/// Evaluate `op` on one channel: the one-channel map the per-row lift (S1) applies to row
/// `channel`. Outputs in [`Op::outputs`] order (per-channel outputs as length-1 vectors).
/// Checks (C1) on the exact values.
pub fn channel_op<T: Scalar>(
    op: Op,
    channel: usize,
    inp: &ChannelIn<T>,
    eps: &T,
) -> Result<Vec<Vec<T>>, SpecError> {
    if op == Op::SyncStats {
        let (mean, m2, var) = ch::merge_shard_stats(
            inp.cells("shard_count"),
            inp.cells("shard_mean"),
            inp.cells("shard_m2"),
        );
        return Ok(vec![vec![mean], vec![m2], vec![var]]);
    }
    let x = inp.cells("x");
    Ok(match op {
        Op::RunningUpdate => {
            let pytorch = match inp.convention {
                Some(Convention::Pytorch) => true,
                Some(Convention::Onnx) => false,
                None => {
                    return Err(SpecError::MissingParam {
                        op: op.name(),
                        field: "convention",
                    })
                }
            };
            let (mean, var) = ch::running_update(
                x,
                inp.one("running_mean"),
                inp.one("running_var"),
                inp.one("momentum"),
                pytorch,
            );
            vec![vec![mean], vec![var]]
        }
        Op::SyncStats => unreachable!("handled above"),
        Op::Forward => {
            let (mu, var) = ch::batch_stats(x);
            check_c1(channel, "var + eps", &var, eps)?;
            let y = ch::bn_eval(x, inp.one("gamma"), inp.one("beta"), &mu, &var, eps);
            vec![y, vec![mu], vec![var]]
        }
        Op::Backward => {
            let (_, var) = ch::batch_stats(x);
            check_c1(channel, "var + eps", &var, eps)?;
            let dy = inp.cells("dy");
            let dx = ch::bn_grad_input(x, dy, inp.one("gamma"), eps);
            vec![
                dx,
                vec![ch::bn_grad_gamma(x, dy, eps)],
                vec![ch::bn_grad_beta(dy)],
            ]
        }
        Op::Eval => {
            check_c1(channel, "var + eps", inp.one("var"), eps)?;
            vec![ch::bn_eval(
                x,
                inp.one("gamma"),
                inp.one("beta"),
                inp.one("mean"),
                inp.one("var"),
                eps,
            )]
        }
        Op::SyncForward => {
            let (mean, m2) = (inp.one("mean"), inp.one("m2"));
            check_c1(channel, "m2 - mean^2 + eps", &ch::sync_var(mean, m2), eps)?;
            vec![ch::sync_bn(
                x,
                inp.one("gamma"),
                inp.one("beta"),
                mean,
                m2,
                eps,
            )]
        }
        Op::SyncBackward => {
            let (mean, m2) = (inp.one("mean"), inp.one("m2"));
            check_c1(channel, "m2 - mean^2 + eps", &ch::sync_var(mean, m2), eps)?;
            let dy = inp.cells("dy");
            let dx = ch::sync_grad_input(
                x,
                dy,
                inp.one("gamma"),
                mean,
                m2,
                inp.one("mean_dy"),
                inp.one("mean_dy_xhat"),
                eps,
            );
            let dg = ch::sync_grad_gamma(x, dy, mean, m2, eps);
            vec![dx, vec![dg], vec![ch::bn_grad_beta(dy)]]
        }
    })
}

/// A validated exact problem: op, geometry, eps and inputs (layout order, exact values).
#[derive(Clone, Debug)]
pub struct Problem {
    /// The op.
    pub op: Op,
    /// Layout and shape.
    pub geom: Geometry,
    /// `eps`, exact.
    pub eps: Rational,
    /// Inputs by name, each in its layout's order (cells) or `[C]`.
    pub inputs: BTreeMap<String, Vec<QSqrt>>,
    /// Scalar parameters (`momentum`, `convention` of [`Op::RunningUpdate`]).
    pub params: Params,
}

/// Outputs by name, each in the layout's order or `[C]`.
pub type Outputs = BTreeMap<&'static str, Vec<QSqrt>>;

impl Problem {
    /// Check names, lengths, eps and rationality (C2, C3); radicands of `mean_dy_xhat` are
    /// checked per channel by [`Problem::channel_inputs`].
    pub fn new(
        op: Op,
        geom: Geometry,
        eps: Rational,
        inputs: BTreeMap<String, Vec<QSqrt>>,
    ) -> Result<Problem, SpecError> {
        Problem::new_with_params(op, geom, eps, inputs, Params::default())
    }

    /// [`Problem::new`] with scalar parameters: [`Op::RunningUpdate`] needs `momentum` in
    /// `[0, 1]` (C7) and a `convention`; [`Op::SyncStats`] takes layout `rows` (C8) and
    /// non-negative integer counts (C5) with a positive sum (C6).
    pub fn new_with_params(
        op: Op,
        geom: Geometry,
        eps: Rational,
        inputs: BTreeMap<String, Vec<QSqrt>>,
        params: Params,
    ) -> Result<Problem, SpecError> {
        let zero = Rational::from_integer(0.into());
        if op == Op::RunningUpdate {
            let a = params.momentum.as_ref().ok_or(SpecError::MissingParam {
                op: op.name(),
                field: "momentum",
            })?;
            if *a < zero || *a > Rational::from_integer(1.into()) {
                return Err(SpecError::BadParam {
                    field: "momentum",
                    reason: "must be in [0, 1] (C7)",
                    value: crate::exact::fmt_rational(a),
                });
            }
            if params.convention.is_none() {
                return Err(SpecError::MissingParam {
                    op: op.name(),
                    field: "convention",
                });
            }
        }
        if op == Op::SyncStats && geom.layout != crate::Layout::Rows {
            return Err(SpecError::LayoutNotSupported {
                op: op.name(),
                expected: "`rows` (shape [C, R]) (C8)",
                got: geom.layout.name(),
            });
        }
        if eps < Rational::from_integer(0.into()) {
            return Err(SpecError::NegativeEps {
                value: crate::exact::fmt_rational(&eps),
            });
        }
        for name in inputs.keys() {
            if !op.inputs().contains(&name.as_str()) {
                return Err(SpecError::UnknownInput {
                    op: op.name(),
                    field: name.clone(),
                    expected: op.inputs().join(", "),
                });
            }
        }
        for &name in op.inputs() {
            let v = inputs.get(name).ok_or_else(|| SpecError::MissingInput {
                op: op.name(),
                field: name.to_string(),
            })?;
            let expected = match Op::extent(name) {
                Extent::Cells => geom.len(),
                Extent::Channel => geom.c,
                Extent::Shards => geom.m,
            };
            if v.len() != expected {
                let shape = match Op::extent(name) {
                    Extent::Cells => geom.shape.clone(),
                    Extent::Channel => vec![geom.c],
                    Extent::Shards => vec![geom.m],
                };
                return Err(SpecError::Length {
                    field: name.to_string(),
                    expected,
                    got: v.len(),
                    shape,
                });
            }
            if name != "mean_dy_xhat" {
                if let Some(i) = v.iter().position(|e| !e.is_rational()) {
                    return Err(SpecError::Irrational {
                        field: name.to_string(),
                        index: i,
                    });
                }
            }
        }
        if op == Op::SyncStats {
            let counts = &inputs["shard_count"];
            for (i, n) in counts.iter().enumerate() {
                let ok = n
                    .as_rational()
                    .is_some_and(|r| r.is_integer() && *r >= zero);
                if !ok {
                    return Err(SpecError::ShardCount {
                        index: i,
                        value: n.to_string(),
                    });
                }
            }
            if counts.iter().all(QSqrt::is_zero) {
                return Err(SpecError::NoCells);
            }
        }
        Ok(Problem {
            op,
            geom,
            eps,
            inputs,
            params,
        })
    }

    /// The inputs of channel `c` in matrix-view order, with `mean_dy_xhat` moved into the
    /// channel's field Q(sqrt(q)).
    pub fn channel_inputs(&self, c: usize) -> Result<ChannelIn<QSqrt>, SpecError> {
        let g = &self.geom;
        let mut values = BTreeMap::new();
        for &name in self.op.inputs() {
            let data = &self.inputs[name];
            let v = match Op::extent(name) {
                Extent::Cells => (0..g.m).map(|k| data[g.offset(c, k)].clone()).collect(),
                Extent::Channel => vec![data[c].clone()],
                Extent::Shards => data.clone(),
            };
            values.insert(name, v);
        }
        if let Some(a) = &self.params.momentum {
            if self.op == Op::RunningUpdate {
                values.insert("momentum", vec![QSqrt::rational(a.clone())]);
            }
        }
        if let Some(k) = values
            .get("mean_dy_xhat")
            .map(|v| v[0].clone())
            .filter(|k| !k.is_rational())
        {
            let q = ch::sync_var(&values["mean"][0], &values["m2"][0])
                + QSqrt::rational(self.eps.clone());
            let qr = q.as_rational().expect("q is rational").clone();
            // With q <= 0, channel_op reports (C1) before any arithmetic.
            if qr > Rational::from_integer(0.into()) {
                let val = k.in_field(&qr).ok_or_else(|| SpecError::NotInField {
                    channel: c,
                    radicand: k.d().map(crate::exact::fmt_rational).unwrap_or_default(),
                    q: crate::exact::fmt_rational(&qr),
                })?;
                values.insert("mean_dy_xhat", vec![val]);
            }
        }
        Ok(ChannelIn {
            values,
            convention: self.params.convention,
        })
    }

    /// Evaluate exactly: bridge → per-row lift of [`channel_op`] → bridge back.
    pub fn evaluate(&self) -> Result<Outputs, SpecError> {
        let g = &self.geom;
        let eps = QSqrt::rational(self.eps.clone());
        let names = self.op.outputs();
        let mut out: Vec<Vec<Option<QSqrt>>> = names
            .iter()
            .map(|n| match Op::extent(n) {
                Extent::Cells => vec![None; g.len()],
                Extent::Channel | Extent::Shards => vec![None; g.c],
            })
            .collect();
        for c in 0..g.c {
            let inp = self.channel_inputs(c)?;
            let res = channel_op(self.op, c, &inp, &eps)?;
            for (o, vals) in res.into_iter().enumerate() {
                match Op::extent(names[o]) {
                    Extent::Cells => {
                        for (k, v) in vals.into_iter().enumerate() {
                            out[o][g.offset(c, k)] = Some(v);
                        }
                    }
                    Extent::Channel | Extent::Shards => out[o][c] = vals.into_iter().next(),
                }
            }
        }
        Ok(names
            .iter()
            .zip(out)
            .map(|(n, v)| {
                (
                    *n,
                    v.into_iter()
                        .map(|e| e.expect("every output written"))
                        .collect(),
                )
            })
            .collect())
    }
}
