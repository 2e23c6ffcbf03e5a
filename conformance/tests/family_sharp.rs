//! Sharp verdicts for the normalization family (issue #28's rule, carried to the family): on
//! every case of the family suites, in every precision, each sharpness control — a doubled
//! variance (rms_norm: mean square) and an `rstd` 25 % too large, built-in known-bad kernels
//! (`bad-ln-var-doubled`, …) — is rejected wherever its defect changes the outputs (they
//! differ from the same kernel's without the defect). Run in release.

use bnconf::judge::family::{prepare_family_all, run_family_kernel};
use bnconf::judge::Verdict;
use bnconf::suite::family::family_suite;
use bnconf::suite::Precision;
use bnconf_impl::family::{family_kernel_by_name, Family};

const SEED: u64 = 20261129;

#[test]
fn sharpness_controls_are_rejected_wherever_their_defect_shows() {
    let controls = [
        (
            Family::LayerNorm,
            "ln-twopass",
            ["bad-ln-var-doubled", "bad-ln-rstd-off25"],
        ),
        (
            Family::RmsNorm,
            "rms-twopass",
            ["bad-rms-ms-doubled", "bad-rms-rstd-off25"],
        ),
        (
            Family::GroupNorm,
            "gn-twopass",
            ["bad-gn-var-doubled", "bad-gn-rstd-off25"],
        ),
    ];
    let mut report = Vec::new();
    let mut coverage = Vec::new();
    for (family, good, bads) in controls {
        let s = family_suite(family, &Precision::ALL, SEED);
        coverage.extend(classes_left_without_a_case(&s));
        let prep = prepare_family_all(&s.cases).expect("valid suite");
        let good = family_kernel_by_name(good).unwrap();
        for bad in bads {
            let k = family_kernel_by_name(bad).unwrap();
            let results = run_family_kernel(k.as_ref(), &prep);
            let (mut shows, mut rejected) = (0, 0);
            for (p, r) in prep.iter().zip(&results) {
                let a = k.run(&p.case.case).unwrap();
                let b = good.run(&p.case.case).unwrap();
                if a == b {
                    continue;
                }
                shows += 1;
                if r.verdict == Verdict::Fail {
                    rejected += 1;
                } else {
                    report.push(format!(
                        "{bad} passes {} (worst {:.3})",
                        r.id, r.worst_ratio
                    ));
                }
            }
            eprintln!(
                "{bad}: shows on {shows} of {} cases, rejected on {rejected}",
                prep.len()
            );
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    assert!(
        coverage.is_empty(),
        "exclusions left a class without a case in its precision:\n{}",
        coverage.join("\n")
    );
}

/// The (class, precision) pairs that lost a case to exclusion and kept none: coverage must not
/// vanish when a case is excluded as ill-posed or non-discriminating (the class keeps another
/// op's case in that precision).
fn classes_left_without_a_case(s: &bnconf::suite::family::FamilySuite) -> Vec<String> {
    let mut out = Vec::new();
    for (id, reason) in &s.excluded {
        // `<op>.<layout>.<precision>.<class>`
        let parts: Vec<&str> = id.splitn(4, '.').collect();
        let [_, _, precision, class] = parts[..] else {
            panic!("excluded id {id} is not <op>.<layout>.<precision>.<class>");
        };
        let kept = s
            .cases
            .iter()
            .any(|c| c.class == class && c.precision == precision);
        if !kept {
            out.push(format!("{id} ({reason})"));
        }
    }
    out
}
