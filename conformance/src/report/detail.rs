//! One failing case in words: where the worst element sits in the layout (n, c, h, w), how far
//! off it is (ratio, `actual/expected`, a hint when that is a Bessel factor), how many of the
//! output's elements are over, the inputs there. Used by the human report, `Report`'s
//! `Display` in the library, the JUnit failure messages and the HTML page.

use crate::judge::verdict::{CaseResult, OutputResult, Verdict};
pub use crate::report::json::actual_over_expected;
use crate::report::json::hexf;
use crate::suite::SuiteCase;
use bnconf_spec::op::Extent;
use bnconf_spec::{Geometry, Layout, Op};

/// Where an element of an output lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// Its channel.
    pub channel: usize,
    /// Its cell within the channel (`k = n·hw + s`, the Mat position `(channel, k)`), for
    /// outputs with the layout's shape.
    pub cell: Option<usize>,
    /// Its coordinates, axis name and index, in the output's shape (`n`, `c`, `h`, `w`; `c`,
    /// `s` for `rows`/`flat`; `c` alone for a per-channel output).
    pub coords: Vec<(&'static str, usize)>,
}

impl Location {
    /// `n=1, c=2, h=1, w=3`.
    pub fn coords_text(&self) -> String {
        self.coords
            .iter()
            .map(|(a, i)| format!("{a}={i}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The axis names of a layout's shape.
pub fn axes(layout: Layout) -> &'static [&'static str] {
    match layout {
        Layout::Rows | Layout::Flat => &["c", "s"],
        Layout::Chw => &["c", "h", "w"],
        Layout::Nchw => &["n", "c", "h", "w"],
        Layout::Nhwc => &["n", "h", "w", "c"],
        Layout::Nc => &["n", "c"],
        Layout::Ncl => &["n", "c", "l"],
        Layout::Ncdhw => &["n", "c", "d", "h", "w"],
        Layout::Ndhwc => &["n", "d", "h", "w", "c"],
    }
}

/// Locate element `index` of output (or input) `name` of `case`: the row-major index
/// unravelled over the shape, and the channel and cell that `Geometry::offset` maps to it
/// (inverted: `offset(channel, cell) == index`).
pub fn locate(case: &SuiteCase, name: &str, index: usize) -> Location {
    match Op::extent(name) {
        Extent::Channel => Location {
            channel: index,
            cell: None,
            coords: vec![("c", index)],
        },
        Extent::Shards => Location {
            channel: 0,
            cell: None,
            coords: vec![("r", index)],
        },
        Extent::Cells => {
            let shape = &case.shape;
            let names = axes(case.layout);
            let mut rest = index;
            let mut coords = vec![("", 0usize); shape.len()];
            for d in (0..shape.len()).rev() {
                let n = shape[d].max(1);
                coords[d] = (names.get(d).copied().unwrap_or("?"), rest % n);
                rest /= n;
            }
            let get = |a: &str| {
                coords
                    .iter()
                    .find(|(n, _)| *n == a)
                    .map(|&(_, i)| i)
                    .unwrap_or(0)
            };
            let channel = get("c");
            let cell = match case.layout {
                Layout::Rows | Layout::Flat => get("s"),
                _ => {
                    // k = n·hw + s, s the row-major index over the spatial axes (every axis
                    // but n and c, in order; none for nc).
                    let (mut s, mut hw) = (0, 1);
                    for (d, &(a, i)) in coords.iter().enumerate() {
                        if a != "n" && a != "c" {
                            s = s * shape[d] + i;
                            hw *= shape[d];
                        }
                    }
                    get("n") * hw + s
                }
            };
            debug_assert!(Geometry::new(case.layout, shape, usize::MAX)
                .map(|g| g.offset(channel, cell) == index)
                .unwrap_or(true));
            Location {
                channel,
                cell: Some(cell),
                coords,
            }
        }
    }
}

/// Cells per channel of a case.
pub fn cells_per_channel(case: &SuiteCase) -> usize {
    Geometry::new(case.layout, &case.shape, usize::MAX)
        .map(|g| g.m)
        .unwrap_or(1)
}

/// A factor of the cell count `actual/expected` is close to: `m/(m−1)` (a variance divided
/// by m−1), `(m−1)/m`, their square roots (the normalisation of such a variance).
pub fn factor_hint(ratio: f64, m: usize) -> Option<String> {
    if m < 2 {
        return None;
    }
    let mf = m as f64;
    let b = mf / (mf - 1.0);
    let cands = [
        (b, format!("m/(m−1) = {m}/{}", m - 1)),
        (1.0 / b, format!("(m−1)/m = {}/{m}", m - 1)),
        (b.sqrt(), format!("sqrt(m/(m−1)) = sqrt({m}/{})", m - 1)),
        (
            1.0 / b.sqrt(),
            format!("sqrt((m−1)/m) = sqrt({}/{m})", m - 1),
        ),
    ];
    cands
        .into_iter()
        .find(|(c, _)| (ratio - c).abs() <= 0.01 * (c - 1.0).abs())
        .map(|(_, s)| s)
}

/// `1 element` / `3 elements`.
pub fn elements(n: usize) -> String {
    if n == 1 {
        "1 element".into()
    } else {
        format!("{n} elements")
    }
}

/// How bad a case is: its worst ratio over its k (infinite for a malformed output or NaN).
pub fn severity(r: &CaseResult) -> f64 {
    match r.verdict {
        Verdict::Malformed(_) => f64::INFINITY,
        _ if r.worst_ratio.is_nan() => f64::INFINITY,
        _ => r.worst_ratio / r.k,
    }
}

/// The case's outputs that are over budget, worst first.
pub fn over_worst_first(r: &CaseResult) -> Vec<&OutputResult> {
    let mut v: Vec<&OutputResult> = r.outputs.iter().filter(|o| o.n_over > 0).collect();
    v.sort_by(|a, b| b.worst_ratio.total_cmp(&a.worst_ratio));
    v
}

fn short(s: &str) -> String {
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s.to_string()
    }
}

/// `y[40] at (n=1, c=2, h=1, w=3)`, or `var[0] (channel 0)`.
pub fn where_text(case: &SuiteCase, o: &OutputResult) -> String {
    let loc = locate(case, &o.name, o.index);
    let text = match Op::extent(&o.name) {
        Extent::Cells => format!("{}[{}] at ({})", o.name, o.index, loc.coords_text()),
        _ => format!("{}[{}] (channel {})", o.name, o.index, loc.channel),
    };
    format!("{text}{}", rank_text(case, o))
}

/// ` on rank 2` (per-channel outputs: that rank's copy) or ` on rank 2 (its row 3)`
/// (per-element outputs: the rank holding the element); empty outside the replicated suite.
pub fn rank_text(case: &SuiteCase, o: &OutputResult) -> String {
    let Some(r) = o.rank else {
        return String::new();
    };
    match Op::extent(&o.name) {
        Extent::Cells if !case.shard_sizes.is_empty() => {
            let row = crate::suite::replicated::row_len(&case.shape);
            let off = crate::suite::replicated::offsets(&case.shard_sizes)[r];
            format!(" on rank {r} (its row {})", o.index / row - off)
        }
        _ => format!(" on rank {r}"),
    }
}

impl CaseResult {
    /// Multi-line failure detail, worst output first: where the worst element lies (n, c, h, w;
    /// channel and cell), `k of n elements over`, the inputs there, expected, actual, their
    /// ratio, the budget ([`render`]).
    pub fn detail(&self, case: &SuiteCase) -> String {
        render(self, case)
    }
}

/// The multi-line detail of a failing case (`CaseResult::detail`).
pub fn render(r: &CaseResult, case: &SuiteCase) -> String {
    let m = cells_per_channel(case);
    let mut s = format!(
        "{} [{} {} {} {} {}]: {}",
        r.id,
        r.op,
        r.layout,
        r.dtype,
        r.level.name(),
        r.class,
        r.verdict.name()
    );
    match &r.verdict {
        Verdict::Malformed(w) | Verdict::Unsupported(w) => s += &format!(" — {w}"),
        Verdict::Fail => {
            s += &format!(
                " — worst ratio {} = {}·k (k = {:.1} at m = {m} cells per channel)",
                super::fmt_ratio(r.worst_ratio),
                super::fmt_ratio(severity(r)),
                r.k
            )
        }
        Verdict::Pass => {}
    }
    let g = Geometry::new(case.layout, &case.shape, usize::MAX).expect("valid");
    for o in over_worst_first(r) {
        let u = case.dtype_of(&o.name).unit_roundoff();
        let loc = locate(case, &o.name, o.index);
        let chan = loc.channel;
        // Up to 8 values, then the count.
        let list = |vals: Vec<f64>| {
            let mut t: Vec<String> = vals.iter().take(8).map(|x| format!("{x:e}")).collect();
            if vals.len() > 8 {
                t.push(format!("… ({} values)", vals.len()));
            }
            format!("[{}]", t.join(", "))
        };
        let inputs: Vec<String> = case
            .op
            .inputs()
            .iter()
            .filter_map(|&n| {
                let v = &case.inputs[n];
                match (Op::extent(n), Op::extent(&o.name)) {
                    (Extent::Cells, Extent::Cells) => v.get(o.index).map(|x| format!("{n}={x:e}")),
                    // A per-channel output: the channel's cells.
                    (Extent::Cells, _) => Some(format!(
                        "{n}[channel {chan}]={}",
                        list((0..g.m).map(|k| v[g.offset(chan, k)]).collect())
                    )),
                    (Extent::Shards, _) => Some(format!("{n}={}", list(v.clone()))),
                    (Extent::Channel, _) => v.get(chan).map(|x| format!("{n}={x:e}")),
                }
            })
            .collect();
        let place = match Op::extent(&o.name) {
            Extent::Cells => format!(
                "{}[{}] at ({}; channel {chan}, cell {} of {m})",
                o.name,
                o.index,
                loc.coords_text(),
                loc.cell.unwrap_or(0)
            ),
            _ => format!("{}[{}] (channel {chan})", o.name, o.index),
        };
        let place = format!("{place}{}", rank_text(case, o));
        let ratio_line = match actual_over_expected(o) {
            Some(q) => {
                let hint = factor_hint(q, m)
                    .map(|h| format!(" ≈ {h}"))
                    .unwrap_or_default();
                format!("actual/expected = {q:.6}{hint} (m = {m})")
            }
            None => format!(
                "actual/expected: undefined (expected ≈ {:e})",
                o.expected_f64
            ),
        };
        s += &format!(
            "\n    {place}: {} of {} over; worst ratio {:.3e} > k = {:.1}\n      inputs there: {}\n      expected {} (≈ {:e})\n      actual   {:e} ({})\n      {ratio_line}\n      |error| = {:.3e}, budget k·u·(cond+mag) = {:.3e} (u = {:e}, cond = {:.3e}, mag = {:.3e})",
            o.n_over,
            elements(o.len),
            o.worst_ratio,
            r.k,
            inputs.join(", "),
            short(&o.expected),
            o.expected_f64,
            o.actual,
            hexf(o.actual),
            (o.actual - o.expected_f64).abs(),
            r.k * u * o.budget.total(u),
            u,
            o.budget.cond,
            o.budget.mag_at(u)
        );
    }
    s
}

/// One line for a JUnit `<failure message=…>`: the worst output, its index and place, expected,
/// actual, their ratio, the ratio to the budget and k.
pub fn junit_message(r: &CaseResult, case: Option<&SuiteCase>) -> String {
    if let Verdict::Malformed(w) = &r.verdict {
        return w.clone();
    }
    let Some(o) = over_worst_first(r).into_iter().next() else {
        return format!(
            "worst ratio {} > k = {:.1}",
            super::fmt_ratio(r.worst_ratio),
            r.k
        );
    };
    let place = match case {
        Some(c) => where_text(c, o),
        None => format!("{}[{}]", o.name, o.index),
    };
    let q = actual_over_expected(o)
        .map(|q| format!(" (actual/expected {q:.6})"))
        .unwrap_or_default();
    format!(
        "{place}: expected {:e}, actual {:e}{q}; ratio {} > k = {:.1}; {} of {} over",
        o.expected_f64,
        o.actual,
        super::fmt_ratio(o.worst_ratio),
        r.k,
        o.n_over,
        elements(o.len)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Level;
    use bnconf_spec::exact::round::FloatFormat;

    /// On every layout, the located channel and cell of each element are the bridge's
    /// (`Geometry::offset(channel, cell) == index`), and the coordinates name every axis.
    #[test]
    fn locate_inverts_the_bridge_on_every_layout() {
        for (layout, shape) in [
            (Layout::Rows, vec![3, 5]),
            (Layout::Flat, vec![3, 5]),
            (Layout::Chw, vec![3, 2, 4]),
            (Layout::Nchw, vec![2, 3, 2, 4]),
            (Layout::Nhwc, vec![2, 2, 4, 3]),
            (Layout::Nc, vec![6, 3]),
            (Layout::Ncl, vec![2, 3, 5]),
            (Layout::Ncdhw, vec![2, 3, 2, 2, 3]),
            (Layout::Ndhwc, vec![2, 2, 2, 3, 3]),
        ] {
            let case = SuiteCase {
                id: "t".into(),
                level: Level::Core,
                class: "t".into(),
                target: String::new(),
                dtype: FloatFormat::F64,
                param_dtype: FloatFormat::F64,
                op: Op::Forward,
                layout,
                shape: shape.clone(),
                eps: "1e-5".into(),
                momentum: None,
                convention: None,
                inputs: Default::default(),
                shard_sizes: vec![],
            };
            let g = Geometry::new(layout, &shape, usize::MAX).unwrap();
            for index in 0..g.len() {
                let loc = locate(&case, "y", index);
                let cell = loc.cell.unwrap();
                assert_eq!(g.offset(loc.channel, cell), index, "{layout:?} {index}");
                let names: Vec<&str> = loc.coords.iter().map(|&(a, _)| a).collect();
                assert_eq!(names, axes(layout), "{layout:?}");
            }
        }
    }
}
