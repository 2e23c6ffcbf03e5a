//! The reports of judged normalization-family cases, shared by `bnconf check --family` and
//! the in-process Python judge (`testing::in_memory_family`): the per-family table, the text
//! report (with the optional outputs not given) and the `--report` document.

use super::{human_report, json_report, worst_cell, Context};
use crate::judge::verdict::{summarize, CaseResult};
use crate::suite::family::{FamilySuite, FAMILY_LEVELS};
use crate::suite::family_select::FamilySelection;
use bnconf_impl::family::Named;
use serde_json::{json, Value};

/// The optional outputs a kernel did not give, per case id.
pub type NotGiven = [(String, Vec<&'static str>)];

/// The text report: `head`, the check report, the optional outputs not given (judged on the
/// outputs given), then the summary line.
pub fn family_text(ctx: &Context, head: &str, not_given: &NotGiven, max_details: usize) -> String {
    let full = human_report(ctx, max_details);
    let (body, summary) = match full.rfind("\nsummary:") {
        Some(i) => full.split_at(i),
        None => (full.as_str(), ""),
    };
    let mut text = format!("{head}{body}");
    if !not_given.is_empty() {
        text += &format!(
            "\noptional outputs not given ({} cases; judged on the outputs given):\n",
            not_given.len()
        );
        for (id, names) in not_given {
            text += &format!("  {id}: {}\n", names.join(", "));
        }
    }
    text + summary
}

/// The `--report` document: batch_norm's, with `"family"` and, per case, `"not_given"`.
pub fn family_json(ctx: &Context, family: &str, not_given: &NotGiven) -> Value {
    let mut doc = json_report(ctx);
    doc["family"] = json!(family);
    if let Some(cases) = doc.get_mut("cases").and_then(Value::as_array_mut) {
        for c in cases {
            let id = c.get("id").and_then(Value::as_str).unwrap_or("");
            let ng = not_given
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            c["not_given"] = json!(ng);
        }
    }
    doc
}

/// `check --family`'s table (`run --family`'s, for the kernel judged): one row per family, a
/// cell per level (verdict and worst ratio; `-` where nothing was judged).
pub fn family_table(fs: &FamilySelection, s: &FamilySuite, results: &[CaseResult]) -> String {
    let mut t = format!(
        "bnconf check: family {} (seed {}{}), {} cases ({} excluded as ill-posed or non-discriminating) in {}\n",
        fs.family,
        fs.seed,
        fs.shard.map(|sh| format!(", shard {sh}")).unwrap_or_default(),
        s.cases.len(),
        s.excluded.len(),
        fs.precision.name()
    );
    t += "cell = verdict and worst ratio |error| / (u·(cond+mag)); conforming when ≤ k = 4 + 2·log2(n) (n: K, or the cells summed into dgamma/dbeta)\n\n";
    let d = fs.precision.static_name();
    t += &format!("{:<28}", "family");
    for l in FAMILY_LEVELS {
        t += &format!(" {:>17}", format!("{} {d}", l.name()));
    }
    t += "  verdict\n";
    for f in &fs.families {
        let ops: Vec<&str> = f.ops().iter().map(|o| Named::name(o)).collect();
        let mine: Vec<&CaseResult> = results.iter().filter(|r| ops.contains(&r.op)).collect();
        t += &format!("{:<28}", Named::name(f));
        for l in FAMILY_LEVELS {
            let sel: Vec<&CaseResult> = mine.iter().copied().filter(|r| r.level == l).collect();
            let sm = summarize(sel.iter().copied());
            let v = if sm.passed + sm.failed == 0 {
                "-".to_string()
            } else if sm.failed > 0 {
                format!("FAIL({})", sm.failed)
            } else {
                "pass".into()
            };
            t += &format!(
                " {:>17}",
                format!("{v} {}", worst_cell(sel.iter().copied()))
            );
        }
        let sm = summarize(mine.iter().copied());
        let verdict = if sm.failed > 0 {
            format!("FAIL ({} cases)", sm.failed)
        } else if sm.passed == 0 {
            "unsupported".into()
        } else {
            "conforms".into()
        };
        t += &format!("  {verdict}\n");
    }
    t + "\n"
}
