//! batch_norm on the layouts added in bnconf 0.3 (docs/FORMAT.md, "Added in bnconf 0.3:
//! batch_norm on nc, ncl, ncdhw, ndhwc"), data-driven over the four: each exports (every op
//! but `sync_stats`), a built-in good kernel's outputs conform through `check DIR`, a known-bad
//! kernel is rejected on them, the export formats write or refuse them as documented, and a
//! bad shape (wrong rank, an extent 0) is exit 2 naming `shape`. Run in release
//! (`cargo test --release -p bnconf --test bn_layouts`).

mod common;

use common::{bnconf, scratch, text};
use serde_json::{json, Value};
use std::path::Path;

/// The new layouts, a shape of each (C = 3) and its channel axis.
const LAYOUTS: [(&str, &[usize], usize); 4] = [
    ("nc", &[6, 3], 1),
    ("ncl", &[4, 3, 5], 1),
    ("ncdhw", &[2, 3, 2, 2, 3], 1),
    ("ndhwc", &[2, 2, 2, 3, 3], 4),
];

fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn case_ids(m: &Value) -> Vec<String> {
    m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().or(c["id"].as_str()).unwrap().to_string())
        .collect()
}

fn export(dir: &Path, dtype: &str, layout: &str, format: &str) {
    let o = bnconf(&[
        "export",
        "--dtype",
        dtype,
        "--layouts",
        layout,
        "--format",
        format,
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "export {layout} {dtype}: {}", text(&o));
}

/// Each layout in f32 and f64: the default suite has every batch_norm op on it (and nothing
/// else), a good kernel conforms (exit 0), a known-bad kernel is rejected (exit 1).
#[test]
fn good_kernel_conforms_and_known_bad_is_rejected_on_every_new_layout() {
    for (layout, shape, _) in LAYOUTS {
        for dtype in ["f32", "f64"] {
            let d = scratch("bn-layouts", &format!("{layout}-{dtype}"));
            export(&d, dtype, layout, "protocol");
            let ids = case_ids(&manifest(&d));
            for op in [
                "forward",
                "backward",
                "eval",
                "sync_forward",
                "sync_backward",
                "running_update",
            ] {
                assert!(
                    ids.iter()
                        .any(|i| i.starts_with(&format!("{op}.{layout}.{dtype}."))),
                    "{layout} {dtype}: no {op} case in {ids:?}"
                );
            }
            assert!(
                ids.iter().all(|i| i.split('.').nth(1) == Some(layout)),
                "{ids:?}"
            );
            let case: Value = serde_json::from_str(
                &std::fs::read_to_string(d.join(&ids[0]).join("case.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(case["layout"], layout);
            assert_eq!(case["shape"], json!(shape), "{layout}");

            let o = bnconf(&["kernel", "twopass-native", d.to_str().unwrap()]);
            assert!(o.status.success(), "{}", text(&o));
            let o = bnconf(&["check", d.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(0), "{layout} {dtype}: {}", text(&o));

            let bad = scratch("bn-layouts", &format!("{layout}-{dtype}-bad"));
            export(&bad, dtype, layout, "protocol");
            let o = bnconf(&["kernel", "bad-eps-outside-sqrt", bad.to_str().unwrap()]);
            assert!(o.status.success(), "{}", text(&o));
            let o = bnconf(&["check", bad.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(1), "{layout} {dtype}: {}", text(&o));
            let _ = std::fs::remove_dir_all(&d);
            let _ = std::fs::remove_dir_all(&bad);
        }
    }
}

/// Export `suite` (f32) on one layout into `dir`; the case ids.
fn export_suite(dir: &Path, suite: &str, layout: &str) -> Vec<String> {
    let o = bnconf(&[
        "export",
        "--suite",
        suite,
        "--layouts",
        layout,
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "export {suite} {layout}: {}", text(&o));
    case_ids(&manifest(dir))
}

/// The `extreme` and `replicated` suites have the new layouts too: `extreme` the range
/// classes (`huge`, `tiny`) on each, `replicated` three classes on each, split across ranks
/// as on nchw (N = 16 rows first, so a shard is a block of rows). On each layout the
/// replicated good kernel conforms and a known-bad merge is rejected (the ranks simulated
/// in process by `bnconf kernel`).
#[test]
fn extreme_and_replicated_suites_take_the_new_layouts() {
    for (layout, _, axis) in LAYOUTS {
        let d = scratch("bn-layouts", &format!("{layout}-extreme"));
        let ids = export_suite(&d, "extreme", layout);
        for class in ["huge", "tiny"] {
            assert!(
                ids.iter()
                    .any(|i| i.ends_with(&format!(".{layout}.f32.{class}"))),
                "extreme {layout}: no {class} case in {ids:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&d);

        for (kernel, code) in [("replicated-chan", 0), ("bad-rep-avg-var", 1)] {
            let d = scratch("bn-layouts", &format!("{layout}-replicated-{kernel}"));
            let ids = export_suite(&d, "replicated", layout);
            for op in ["forward", "backward", "running_update"] {
                for split in ["r3-empty", "r8-unequal"] {
                    assert!(
                        ids.iter()
                            .any(|i| i.starts_with(&format!("{op}.{layout}.f32."))
                                && i.ends_with(split)),
                        "replicated {layout}: no {op} case split {split} in {ids:?}"
                    );
                }
            }
            let case: Value = serde_json::from_str(
                &std::fs::read_to_string(d.join(&ids[0]).join("case.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(case["shape"][0], 16, "{layout}: N first");
            assert_eq!(case["shape"][axis], 3, "{layout}: C on axis {axis}");
            let o = bnconf(&["kernel", kernel, d.to_str().unwrap()]);
            assert!(o.status.success(), "{}", text(&o));
            let o = bnconf(&["check", "--suite", "replicated", d.to_str().unwrap()]);
            assert_eq!(
                o.status.code(),
                Some(code),
                "{layout} {kernel}: {}",
                text(&o)
            );
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}

/// StableHLO writes each new layout with the channel axis as `feature_index`; ONNX writes the
/// channels-first ones and lists `ndhwc` as unsupported, with its reason.
#[test]
fn export_formats_write_or_refuse_the_new_layouts() {
    for (layout, _, axis) in LAYOUTS {
        let d = scratch("bn-layouts", &format!("shlo-{layout}"));
        export(&d, "f32", layout, "stablehlo");
        let m = manifest(&d);
        let cases = m["cases"].as_array().unwrap();
        assert!(!cases.is_empty(), "{layout}: {m}");
        for c in cases {
            assert_eq!(c["layout"], layout);
            assert_eq!(c["feature_index"], json!(axis), "{layout}: {c}");
        }
        let _ = std::fs::remove_dir_all(&d);

        let d = scratch("bn-layouts", &format!("onnx-{layout}"));
        export(&d, "f32", layout, "onnx");
        let m = manifest(&d);
        let written = m["cases"].as_array().map_or(0, Vec::len);
        let text = m.to_string();
        if layout == "ndhwc" {
            assert_eq!(written, 0, "{m}");
            assert!(
                text.contains("layout ndhwc: BatchNormalization takes the channel on axis 1"),
                "{m}"
            );
        } else {
            assert!(written > 0, "{layout}: {m}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// `bnconf golden` of a case file on a new layout: a valid one has goldens; a wrong rank or an
/// extent 0 is exit 2 naming `shape`, with nothing on stdout.
#[test]
fn bad_shapes_on_the_new_layouts_are_exit_2_naming_shape() {
    let d = scratch("bn-layouts", "golden");
    // Every shape of LAYOUTS has C = 3.
    let case = |layout: &str, shape: &[usize]| {
        let len: usize = shape.iter().product();
        let c = 3;
        json!({"format": "bnconf-case/1", "id": "mine", "op": "forward", "layout": layout,
               "shape": shape, "dtype": "f32", "eps": "1e-5",
               "inputs": {"x": (0..len).map(|i| i as f64 * 0.5).collect::<Vec<_>>(),
                          "gamma": vec![1.0; c], "beta": vec![0.0; c]}})
    };
    let golden = |name: &str, v: &Value| {
        let p = d.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        bnconf(&["golden", p.to_str().unwrap()])
    };
    for (layout, shape, _) in LAYOUTS {
        let o = golden(&format!("{layout}.json"), &case(layout, shape));
        assert_eq!(o.status.code(), Some(0), "{layout}: {}", text(&o));
        let g: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(g["case"]["layout"], layout);

        let mut wrong_rank = shape.to_vec();
        wrong_rank.pop();
        let o = golden(&format!("{layout}-rank.json"), &case(layout, &wrong_rank));
        assert_eq!(o.status.code(), Some(2), "{layout}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!(
                "shape: layout `{layout}` needs {} dimensions, got {}",
                shape.len(),
                shape.len() - 1
            )),
            "{err}"
        );
        assert!(o.stdout.is_empty());

        let mut zero = shape.to_vec();
        zero[0] = 0;
        let o = golden(&format!("{layout}-zero.json"), &case(layout, &zero));
        assert_eq!(o.status.code(), Some(2), "{layout}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("shape: dimension 0 is 0"), "{err}");
        assert!(o.stdout.is_empty());
    }
    let _ = std::fs::remove_dir_all(&d);
}
