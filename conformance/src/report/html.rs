//! `--html FILE.html`: one self-contained page (inline CSS and SVG; no script, no font, no
//! request to any network) that a browser shows offline: the verdict, the diagnosis, the
//! ratios of every case per op and class on a log scale with each case's k(m), the per-op ×
//! class summary as a coloured table, and for the worst cases every element's ratio and the
//! worst elements with their place in the layout.

use super::{detail, fmt_ratio, worst_cell, Context};
use crate::error::Result;
use crate::formats::atomic::write_bytes;
use crate::judge::diagnosis::Diagnosis;
use crate::judge::prepare::Prepared;
use crate::judge::verdict::{approx, summarize, CaseResult, Summary, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// Most failing cases given an element plot.
pub const ELEMENT_PLOTS: usize = 12;
/// Most rows of the failing-case table.
pub const TABLE_ROWS: usize = 500;

/// HTML-escape text.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

const CSS: &str = "
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1d2330;background:#fff;max-width:1320px}
h1{font-size:22px;margin:0 0 6px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dde6;padding-bottom:4px}
h3{font-size:15px;margin:14px 0 4px;font-family:ui-monospace,Menlo,Consolas,monospace}
.sub{color:#5a6475;font-size:13px;margin:0 0 14px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600}
.ok{background:#2e7d32}.bad{background:#c62828}
.stats{display:flex;gap:12px;margin:12px 0}
.stat{border:1px solid #d8dde6;border-radius:6px;padding:8px 14px;min-width:110px}
.stat b{display:block;font-size:20px}
.diag{border-left:5px solid #c62828;background:#fdf2f2;padding:10px 14px;margin:12px 0}
.diag.none{border-color:#9aa3b2;background:#f5f6f8}
.diag p{margin:4px 0}
table{border-collapse:collapse;font-size:12.5px}
th,td{border:1px solid #d8dde6;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f1f3f7} td.l,th.l{text-align:left}
.mono{font-family:ui-monospace,Menlo,Consolas,monospace}
.plots{display:flex;flex-wrap:wrap;gap:14px}
.card{border:1px solid #d8dde6;border-radius:6px;padding:8px 10px;margin:10px 0}
.legend{font-size:12px;color:#5a6475;margin:4px 0}
svg text{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}
";

/// A log-scale y axis from 10^lo to 10^hi.
struct LogY {
    lo: i32,
    hi: i32,
    top: f64,
    height: f64,
}

impl LogY {
    fn new(values: impl Iterator<Item = f64>, top: f64, height: f64) -> LogY {
        let mut mn = f64::INFINITY;
        let mut mx = 1.0f64;
        for v in values {
            if v.is_finite() && v > 0.0 {
                mn = mn.min(v);
                mx = mx.max(v);
            }
        }
        let lo = if mn.is_finite() {
            (mn.log10().floor() as i32).clamp(-3, 0)
        } else {
            -1
        };
        let hi = (mx.log10().ceil() as i32).max(lo + 2) + 1;
        LogY {
            lo,
            hi,
            top,
            height,
        }
    }
    /// y pixel of a value (0 and below at the bottom edge, infinity/NaN at the top edge).
    fn y(&self, v: f64) -> f64 {
        let l = if v.is_nan() || v.is_infinite() {
            self.hi as f64
        } else if v <= 0.0 {
            self.lo as f64
        } else {
            v.log10().clamp(self.lo as f64, self.hi as f64)
        };
        self.top + self.height * (1.0 - (l - self.lo as f64) / (self.hi - self.lo) as f64)
    }
    fn grid(&self, s: &mut String, x0: f64, x1: f64) {
        // at most about one label per 22 px
        let span = (self.hi - self.lo).max(1);
        let fit = (self.height / 22.0).max(2.0) as i32;
        let step = (span + fit - 1) / fit;
        let mut e = self.lo;
        while e <= self.hi {
            let y = self.y(10f64.powi(e));
            let _ = write!(
                s,
                "<line x1='{x0:.1}' x2='{x1:.1}' y1='{y:.1}' y2='{y:.1}' stroke='#e3e7ee'/>\
                 <text x='{:.1}' y='{:.1}' font-size='10' text-anchor='end' fill='#5a6475'>1e{e}</text>",
                x0 - 4.0,
                y + 3.5
            );
            e += step;
        }
        let _ = write!(
            s,
            "<line x1='{x0:.1}' x2='{x0:.1}' y1='{:.1}' y2='{:.1}' stroke='#9aa3b2'/>",
            self.top,
            self.top + self.height
        );
    }
}

fn color(r: &CaseResult) -> &'static str {
    match r.verdict {
        Verdict::Pass => "#2e7d32",
        _ => "#c62828",
    }
}

/// One op's plot: x = data class (suite order), within a class one column per layout; y = the
/// case's worst ratio on a log scale; a dash at each case's k(m) (the allowance it is judged
/// with) joined into the k(m) line of the op.
fn op_plot(op: &str, dtype: &str, rs: &[&CaseResult]) -> String {
    let mut classes: Vec<&str> = Vec::new();
    for r in rs {
        if !classes.contains(&r.class.as_str()) {
            classes.push(&r.class);
        }
    }
    let layouts: Vec<&str> = bnconf_spec::Layout::ALL.iter().map(|l| l.name()).collect();
    let col = 46.0;
    let (left, top, h) = (52.0, 26.0, 240.0);
    let w = left + col * classes.len() as f64 + 12.0;
    let judged: Vec<&&CaseResult> = rs
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Pass | Verdict::Fail))
        .collect();
    let ys = LogY::new(
        judged
            .iter()
            .map(|r| r.worst_ratio)
            .chain(judged.iter().map(|r| r.k)),
        top,
        h,
    );
    let height = top + h + 96.0;
    let mut s = format!(
        "<svg width='{w:.0}' height='{height:.0}' viewBox='0 0 {w:.0} {height:.0}' role='img' aria-label='{op} {dtype} ratios'>\
         <text x='{left}' y='16' font-size='13' font-weight='600'>{} ({})</text>",
        esc(op),
        esc(dtype)
    );
    ys.grid(&mut s, left, w - 8.0);
    // k(m): a dash per (class, layout) column, joined
    let mut kpts: Vec<(f64, f64)> = Vec::new();
    for (ci, c) in classes.iter().enumerate() {
        let x0 = left + col * ci as f64;
        if ci % 2 == 1 {
            let _ = write!(
                s,
                "<rect x='{x0:.1}' y='{top}' width='{col}' height='{h}' fill='#f7f8fa'/>"
            );
        }
        for (li, l) in layouts.iter().enumerate() {
            let xs = x0 + 5.0 + li as f64 * (col - 10.0) / (layouts.len() - 1) as f64;
            for r in rs.iter().filter(|r| r.class == *c && r.layout == *l) {
                kpts.push((xs, ys.y(r.k)));
            }
        }
        let _ = write!(
            s,
            "<text transform='translate({:.1},{:.1}) rotate(-50)' font-size='10.5' text-anchor='end'>{}</text>",
            x0 + col / 2.0 + 3.0,
            top + h + 12.0,
            esc(c)
        );
    }
    if !kpts.is_empty() {
        let pts: Vec<String> = kpts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            s,
            "<polyline points='{}' fill='none' stroke='#1f5fbf' stroke-width='1.6' stroke-dasharray='5,3'/>",
            pts.join(" ")
        );
    }
    for (ci, c) in classes.iter().enumerate() {
        let x0 = left + col * ci as f64;
        for (li, l) in layouts.iter().enumerate() {
            let xs = x0 + 5.0 + li as f64 * (col - 10.0) / (layouts.len() - 1) as f64;
            for r in rs.iter().filter(|r| r.class == *c && r.layout == *l) {
                let tip = match &r.verdict {
                    Verdict::Unsupported(w) => format!("{}: unsupported ({w})", r.id),
                    Verdict::Malformed(w) => format!("{}: MALFORMED ({w})", r.id),
                    _ => format!(
                        "{}: {} worst ratio {} (k = {:.1}); the gate accepts errors up to {} of \
                         the output's scale",
                        r.id,
                        r.verdict.name(),
                        fmt_ratio(r.worst_ratio),
                        r.k,
                        fmt_rel(r.allowed_rel())
                    ),
                };
                match r.verdict {
                    Verdict::Pass | Verdict::Fail => {
                        let y = ys.y(r.worst_ratio);
                        let _ = write!(
                            s,
                            "<circle cx='{xs:.1}' cy='{y:.1}' r='3.6' fill='{}' fill-opacity='0.85'><title>{}</title></circle>",
                            color(r),
                            esc(&tip)
                        );
                    }
                    Verdict::Malformed(_) => {
                        let y = top + 4.0;
                        let _ = write!(
                            s,
                            "<text x='{xs:.1}' y='{y:.1}' font-size='11' text-anchor='middle' fill='#c62828'>✕<title>{}</title></text>",
                            esc(&tip)
                        );
                    }
                    Verdict::Unsupported(_) => {
                        let y = top + h - 3.0;
                        let _ = write!(
                            s,
                            "<circle cx='{xs:.1}' cy='{y:.1}' r='2.6' fill='none' stroke='#9aa3b2'><title>{}</title></circle>",
                            esc(&tip)
                        );
                    }
                }
            }
        }
    }
    s += "</svg>";
    s
}

/// Per-element ratios of output `name` of a failing case (recomputed from the kept outputs).
fn element_ratios(p: &Prepared, vals: &[f64], name: &str) -> Vec<f64> {
    let u = p.case.dtype_of(name).unit_roundoff();
    let (Some(ap), Some(ex), Some(b)) =
        (p.approx.get(name), p.golden.get(name), p.budgets.get(name))
    else {
        return vec![];
    };
    (0..vals.len().min(ex.len()))
        .map(|i| ap[i].ratio(vals[i], &ex[i], &b[i], u))
        .collect()
}

/// One output's element plot: x = element (flat index in the layout), y = ratio (log), the
/// line at k.
fn element_plot(name: &str, ratios: &[f64], k: f64) -> String {
    let (left, top, h, w) = (52.0, 18.0, 120.0, 420.0);
    let ys = LogY::new(ratios.iter().copied().chain([k]), top, h);
    let height = top + h + 22.0;
    let mut s = format!(
        "<svg width='{w}' height='{height}' viewBox='0 0 {w} {height}' role='img' aria-label='{n} element ratios'>\
         <text x='{left}' y='12' font-size='11.5' font-weight='600'>{n}: ratio per element ({} elements)</text>",
        ratios.len(),
        n = esc(name)
    );
    ys.grid(&mut s, left, w - 6.0);
    let n = ratios.len().max(1);
    let dx = (w - 6.0 - left) / n as f64;
    let ky = ys.y(k);
    for (i, &r) in ratios.iter().enumerate() {
        let x = left + dx * (i as f64 + 0.5);
        let y = ys.y(r);
        let over = r.is_nan() || r > k;
        let fill = if over { "#c62828" } else { "#2e7d32" };
        if n <= 400 {
            let _ = write!(
                s,
                "<circle cx='{x:.1}' cy='{y:.1}' r='{:.1}' fill='{fill}'><title>{}[{i}]: ratio {}</title></circle>",
                (dx / 2.0).clamp(0.8, 2.6),
                esc(name),
                fmt_ratio(r)
            );
        } else {
            let _ = write!(
                s,
                "<rect x='{x:.2}' y='{y:.1}' width='{:.2}' height='1.6' fill='{fill}'/>",
                dx.max(0.3)
            );
        }
    }
    let _ = write!(
        s,
        "<line x1='{left}' x2='{:.1}' y1='{ky:.1}' y2='{ky:.1}' stroke='#1f5fbf' stroke-width='1.4' stroke-dasharray='5,3'/>\
         <text x='{:.1}' y='{:.1}' font-size='10' text-anchor='end' fill='#1f5fbf'>k = {k:.1}</text>\
         <text x='{left}' y='{:.1}' font-size='10' fill='#5a6475'>element index (layout order) →</text></svg>",
        w - 6.0,
        w - 8.0,
        ky - 3.0,
        top + h + 14.0
    );
    s
}

fn cell_color(sm: &Summary, k: f64) -> &'static str {
    if sm.passed + sm.failed == 0 {
        return "#f1f3f7";
    }
    if sm.failed == 0 {
        return "#e3f1e4";
    }
    let x = sm.worst / k;
    if !x.is_finite() || x > 1e6 {
        "#e57373"
    } else if x > 1e3 {
        "#ef9a9a"
    } else if x > 10.0 {
        "#f7c4c4"
    } else {
        "#fde2e2"
    }
}

fn diagnosis_html(diag: Option<&[Diagnosis]>, failing: usize) -> String {
    let Some(diag) = diag else {
        return String::new();
    };
    if failing == 0 {
        return String::new();
    }
    match diag.split_first() {
        None => "<div class='diag none'><p><b>Diagnosis:</b> no known-bad kernel of <span class='mono'>bnconf kernel --list</span> reproduces the failing cases (a defect without a fingerprint, or precision).</p></div>".into(),
        Some((d, rest)) => {
            let mut s = format!(
                "<div class='diag'><p><b>Diagnosis: behaves like <span class='mono'>{}</span> on {} of {} failing cases</b> — {}</p>",
                esc(&d.kernel),
                d.matched,
                d.failing,
                esc(&d.short_description())
            );
            for d in rest {
                let _ = write!(
                    s,
                    "<p>also like <span class='mono'>{}</span> on {} of {} — {}</p>",
                    esc(&d.kernel),
                    d.matched,
                    d.failing,
                    esc(&d.short_description())
                );
            }
            s += "</div>";
            s
        }
    }
}

/// The page.
pub fn render(ctx: &Context, prepared: &[Prepared]) -> String {
    let results = ctx.results;
    let sm = summarize(results);
    let ok = sm.failed == 0
        && sm.passed > 0
        && ctx.harness_failure.is_none()
        && ctx.gate.is_none_or(|g| g.ok());
    let mut s = String::new();
    let title = format!("bnconf check — suite {} ({})", ctx.suite, ctx.dtype);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{}</title><style>{CSS}</style></head><body>",
        esc(&title)
    );
    let _ = write!(
        s,
        "<h1>{} <span class='verdict {}'>{}</span></h1><p class='sub'>ratio = |computed − exact| / (u·(cond + mag)); a case conforms when every element's ratio ≤ k(m) = 4 + 2·log2(m), m = cells per channel{}</p>",
        esc(&title),
        if ok { "ok" } else { "bad" },
        if ok { "conforms" } else { "FAIL" },
        ctx.shard
            .map(|sh| format!("; shard {sh}"))
            .unwrap_or_default()
    );
    let _ = write!(
        s,
        "<div class='stats'><div class='stat'><b>{}</b>cases</div><div class='stat'><b>{}</b>conforming</div><div class='stat'><b>{}</b>not conforming</div><div class='stat'><b>{}</b>unsupported</div><div class='stat'><b>{}</b>worst ratio</div></div>",
        results.len(),
        sm.passed,
        sm.failed,
        sm.unsupported,
        worst_cell(results)
    );
    if let Some(h) = &ctx.harness_failure {
        let _ = write!(
            s,
            "<div class='diag'><p><b>FAILED:</b> {}</p></div>",
            esc(h)
        );
    }
    let failing = results
        .iter()
        .filter(|r| r.verdict == Verdict::Fail)
        .count();
    s += &diagnosis_html(ctx.diagnosis, failing);
    if let Some(g) = ctx.gate {
        let _ = write!(
            s,
            "<div class='diag {}'><p><b>Expectations</b> <span class='mono'>{}</span>: {} expected failures, {} new failures, {} stale entries</p>",
            if g.ok() { "none" } else { "" },
            esc(&g.path),
            g.expected.len(),
            g.new_failures.len(),
            g.stale.len()
        );
        for id in &g.new_failures {
            let _ = write!(
                s,
                "<p>NEW FAILURE <span class='mono'>{}</span></p>",
                esc(id)
            );
        }
        for (e, _) in &g.stale {
            let _ = write!(
                s,
                "<p>STALE expectation <span class='mono'>{}</span>: no case it matches fails any more</p>",
                esc(&e.case)
            );
        }
        s += "</div>";
    }

    // Ratios per op, class and dtype.
    s += "<h2>Ratios per op, class and dtype</h2><p class='legend'>One dot per case: its worst ratio (log scale; <span style='color:#2e7d32'>●</span> conforms, <span style='color:#c62828'>●</span> does not; ✕ malformed output at the top, ○ unsupported at the bottom). Within a class, one column per layout (rows, flat, chw, nchw, nhwc). The dashed blue line is k(m) of each case: dots above it fail. Hover a dot for the case.</p><div class='plots'>";
    let mut by_op: BTreeMap<(usize, &str), Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        let oi = bnconf_spec::Op::ALL
            .iter()
            .position(|o| o.name() == r.op)
            .unwrap_or(usize::MAX);
        by_op.entry((oi, r.dtype)).or_default().push(r);
    }
    for ((_, dtype), rs) in &by_op {
        s += "<div class='card'>";
        s += &op_plot(rs[0].op, dtype, rs);
        s += "</div>";
    }
    s += "</div>";

    // The per-op × class table.
    s += "<h2>Summary per op and class</h2><p class='legend'>Cell: conforming/judged cases and the worst ratio; red where a case fails (darker: further over k).</p><table><tr><th class='l'>class</th>";
    let mut ops: Vec<&str> = Vec::new();
    let mut classes: Vec<&str> = Vec::new();
    for r in results {
        if !ops.contains(&r.op) {
            ops.push(r.op);
        }
        if !classes.contains(&r.class.as_str()) {
            classes.push(&r.class);
        }
    }
    ops.sort_by_key(|o| {
        bnconf_spec::Op::ALL
            .iter()
            .position(|x| x.name() == *o)
            .unwrap_or(usize::MAX)
    });
    for o in &ops {
        let _ = write!(s, "<th>{}</th>", esc(o));
    }
    s += "</tr>";
    for c in &classes {
        let _ = write!(s, "<tr><td class='l mono'>{}</td>", esc(c));
        for o in &ops {
            let rs: Vec<&CaseResult> = results
                .iter()
                .filter(|r| r.op == *o && r.class == *c)
                .collect();
            if rs.is_empty() {
                s += "<td>·</td>";
                continue;
            }
            let sm = summarize(rs.iter().copied());
            let k = rs.iter().map(|r| r.k).fold(f64::INFINITY, f64::min);
            let text = if sm.passed + sm.failed == 0 {
                "unsup.".to_string()
            } else {
                format!(
                    "{}/{} {}",
                    sm.passed,
                    sm.passed + sm.failed,
                    worst_cell(rs.iter().copied())
                )
            };
            let _ = write!(
                s,
                "<td style='background:{}'>{}</td>",
                cell_color(&sm, k),
                esc(&text)
            );
        }
        s += "</tr>";
    }
    s += "</table>";

    // Worst elements per case: the worst case of each (op, class), worst first.
    let bad = ctx.failures();
    let mut shown: Vec<(&str, &str)> = Vec::new();
    let plotted: Vec<&CaseResult> = bad
        .iter()
        .copied()
        .filter(|r| {
            let key = (r.op, r.class.as_str());
            let new = !shown.contains(&key);
            if new {
                shown.push(key);
            }
            new
        })
        .take(ELEMENT_PLOTS)
        .collect();
    let by_id: BTreeMap<&str, &Prepared> =
        prepared.iter().map(|p| (p.case.id.as_str(), p)).collect();
    if !bad.is_empty() {
        let _ = write!(
            s,
            "<h2>Worst elements of the worst cases</h2><p class='legend'>The worst failing case (ratio/k) of each op and class, {} of them, worst first. For each output over budget: every element's ratio (dashed: k), and its worst elements with their place in the layout.</p>",
            plotted.len()
        );
    }
    for r in &plotted {
        let like: Vec<&str> = ctx
            .diag()
            .iter()
            .filter(|d| d.cases.contains(&r.id))
            .map(|d| d.kernel.as_str())
            .collect();
        let _ = write!(
            s,
            "<div class='card'><h3>{}</h3><p class='sub'>{} {} {} · class {} · m = {} · worst ratio {} = {}·k (k = {:.1}){}{}</p>",
            esc(&r.id),
            esc(r.op),
            esc(r.layout),
            esc(r.dtype),
            esc(&r.class),
            ctx.case(&r.id).map(detail::cells_per_channel).unwrap_or(0),
            fmt_ratio(r.worst_ratio),
            fmt_ratio(detail::severity(r)),
            r.k,
            if like.is_empty() {
                String::new()
            } else {
                format!(" · behaves like {}", esc(&like.join(", ")))
            },
            ctx.expected_reason(&r.id)
                .map(|w| format!(" · expected failure: {}", esc(w)))
                .unwrap_or_default()
        );
        if let Verdict::Malformed(w) = &r.verdict {
            let _ = write!(s, "<p>MALFORMED: {}</p></div>", esc(w));
            continue;
        }
        let (Some(p), Some(comp), Some(case)) = (
            by_id.get(r.id.as_str()),
            r.computed.as_ref(),
            ctx.case(&r.id),
        ) else {
            s += "</div>";
            continue;
        };
        s += "<div class='plots'>";
        let mut tables = String::new();
        for o in detail::over_worst_first(r).into_iter().take(3) {
            let Some(vals) = comp.get(&o.name) else {
                continue;
            };
            // (a large case judged by the fast path keeps no exact value per element: no plot)
            let ratios = element_ratios(p, vals, &o.name);
            if ratios.is_empty() {
                continue;
            }
            s += &element_plot(&o.name, &ratios, r.k);
            let mut idx: Vec<usize> = (0..ratios.len()).collect();
            idx.sort_by(|&a, &b| {
                let ra = if ratios[a].is_nan() {
                    f64::INFINITY
                } else {
                    ratios[a]
                };
                let rb = if ratios[b].is_nan() {
                    f64::INFINITY
                } else {
                    ratios[b]
                };
                rb.total_cmp(&ra).then(a.cmp(&b))
            });
            let _ = write!(
                tables,
                "<p class='legend'>{}: {} of {} over</p><table><tr><th>element</th><th class='l'>place</th><th>expected ≈</th><th>actual</th><th>actual/expected</th><th>ratio</th></tr>",
                esc(&o.name),
                o.n_over,
                detail::elements(o.len)
            );
            for &i in idx.iter().take(5) {
                let loc = detail::locate(case, &o.name, i);
                let e = p
                    .golden
                    .get(o.name.as_str())
                    .map_or(f64::NAN, |g| approx(&g[i]));
                let a = vals[i];
                let q = if e != 0.0 && (a / e).is_finite() {
                    format!("{:.6}", a / e)
                } else {
                    "—".into()
                };
                let _ = write!(
                    tables,
                    "<tr><td class='mono'>{}[{i}]</td><td class='l mono'>{} (channel {})</td><td class='mono'>{e:.7e}</td><td class='mono'>{a:.7e}</td><td class='mono'>{q}</td><td>{}</td></tr>",
                    esc(&o.name),
                    esc(&loc.coords_text()),
                    loc.channel,
                    fmt_ratio(ratios[i])
                );
            }
            tables += "</table>";
        }
        s += "</div>";
        s += &tables;
        s += "</div>";
    }

    // Every failing case.
    if !bad.is_empty() {
        let _ = write!(
            s,
            "<h2>Non-conforming cases ({}, worst first)</h2><table><tr><th class='l'>case</th><th class='l'>class</th><th>worst ratio</th><th>k</th><th>ratio/k</th><th class='l'>worst element</th><th class='l'>behaves like</th></tr>",
            bad.len()
        );
        for r in bad.iter().take(TABLE_ROWS) {
            let worst = match (&r.verdict, ctx.case(&r.id)) {
                (Verdict::Malformed(w), _) => format!("MALFORMED: {w}"),
                (_, Some(c)) => detail::over_worst_first(r)
                    .first()
                    .map(|o| detail::where_text(c, o))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            let like: Vec<&str> = ctx
                .diag()
                .iter()
                .filter(|d| d.cases.contains(&r.id))
                .map(|d| d.kernel.as_str())
                .collect();
            let _ = write!(
                s,
                "<tr><td class='l mono'>{}</td><td class='l'>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td class='l mono'>{}</td><td class='l mono'>{}</td></tr>",
                esc(&r.id),
                esc(&r.class),
                fmt_ratio(r.worst_ratio),
                r.k,
                fmt_ratio(detail::severity(r)),
                esc(&worst),
                esc(&like.join(", "))
            );
        }
        if bad.len() > TABLE_ROWS {
            let _ = write!(
                s,
                "<tr><td class='l' colspan='7'>… and {} more (see --report)</td></tr>",
                bad.len() - TABLE_ROWS
            );
        }
        s += "</table>";
    }
    s += "<p class='sub' style='margin-top:24px'>Written by bnconf check --html. Self-contained: no script, no external resource.</p></body></html>\n";
    s
}

/// The HTML report of a family check (`check DIR` of a family export, or `check --case` of a
/// family case file): batch_norm's report of the same results (no per-element plots: the
/// family's cases are not batch_norm's), its gate `k` in the family's words, and a table with
/// one row per case — verdict, worst ratio, k, and the optional outputs the kernel did not
/// give (`not_given`: case id, output names).
pub fn render_family(ctx: &Context, not_given: &[(String, Vec<&'static str>)]) -> String {
    let s = render(ctx, &[]).replace(
        "a case conforms when every element's ratio ≤ k(m) = 4 + 2·log2(m), m = cells per channel",
        "a case conforms when every element's ratio ≤ k = 4 + 2·log2(n), n = K (the cells of a row or group), or the cells summed into dgamma/dbeta",
    );
    let mut t = String::new();
    let _ = write!(
        t,
        "<h2>Cases ({})</h2><table><tr><th class='l'>case</th><th class='l'>op</th><th class='l'>layout</th><th class='l'>dtype</th><th class='l'>class</th><th class='l'>verdict</th><th>worst ratio</th><th>k</th><th class='l'>optional outputs not given</th></tr>",
        ctx.results.len()
    );
    for r in ctx.results {
        let verdict = match &r.verdict {
            Verdict::Pass => "conforms".to_string(),
            Verdict::Fail => "FAIL".to_string(),
            Verdict::Unsupported(w) => format!("unsupported: {w}"),
            Verdict::Malformed(w) => format!("MALFORMED: {w}"),
        };
        let ng = not_given
            .iter()
            .find(|(id, _)| *id == r.id)
            .map(|(_, n)| n.join(", "))
            .unwrap_or_default();
        let _ = write!(
            t,
            "<tr><td class='l mono'>{}</td><td class='l'>{}</td><td class='l'>{}</td><td class='l'>{}</td><td class='l'>{}</td><td class='l' style='background:{}'>{}</td><td>{}</td><td>{:.1}</td><td class='l mono'>{}</td></tr>",
            esc(&r.id),
            esc(r.op),
            esc(r.layout),
            esc(r.dtype),
            esc(&r.class),
            match r.verdict {
                Verdict::Pass => "#e8f5e9",
                Verdict::Fail => "#ffcdd2",
                _ => "#eeeeee",
            },
            esc(&verdict),
            fmt_ratio(r.worst_ratio),
            r.k,
            esc(&ng)
        );
    }
    t += "</table>";
    let tail = "<p class='sub' style='margin-top:24px'>Written by bnconf check --html.";
    match s.rfind(tail) {
        Some(i) => format!("{}{t}{}", &s[..i], &s[i..]),
        None => s + &t,
    }
}

/// `--html FILE.html` of a family check ([`render_family`]).
pub fn write_family(
    path: &Path,
    ctx: &Context,
    not_given: &[(String, Vec<&'static str>)],
) -> Result<()> {
    write_bytes(path, render_family(ctx, not_given).as_bytes())
}

/// `--html FILE.html`.
pub fn write(path: &Path, ctx: &Context, prepared: &[Prepared]) -> Result<()> {
    write_bytes(path, render(ctx, prepared).as_bytes())
}

/// A relative allowance as a percentage (`inf` as is).
fn fmt_rel(v: f64) -> String {
    if v.is_finite() {
        format!("{:.3}%", 100.0 * v)
    } else {
        format!("{v}")
    }
}
