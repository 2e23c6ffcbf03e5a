//! Coverage of the seed items by the property tests (docs/SPEC.md, S1–S31), data-driven:
//! a table maps each seed item to the `spec` function that implements it and to the
//! properties that exercise it. The test fails when an item lacks a property, when a named
//! property does not exist or does not call the item's function, or when the function's doc
//! does not name its seed item.

/// (seed item, source file in `spec/src`, function, [(property file, test)]).
type Entry = (
    u32,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const V: &str = "properties_vjp.rs";
const L: &str = "properties_layout.rs";
const S: &str = "properties_sync.rs";

const COVERAGE: &[Entry] = &[
    (
        1,
        "per_channel.rs",
        "per_row_lift",
        &[(V, "per_row_lift_is_block_diagonal")],
    ),
    (
        2,
        "per_channel.rs",
        "bn_per_channel",
        &[
            (V, "forward_jacobian_is_block_diagonal"),
            (V, "s6_grad_input_equals_jt_dy"),
            (V, "every_layout_backward_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        3,
        "per_channel.rs",
        "bn_per_channel_vjp",
        &[(V, "s6_grad_input_equals_jt_dy")],
    ),
    (
        4,
        "per_channel.rs",
        "bn_per_channel_flat",
        &[
            (V, "s6_grad_input_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        5,
        "per_channel.rs",
        "bn_per_channel_flat_vjp",
        &[(V, "s6_grad_input_equals_jt_dy")],
    ),
    (
        6,
        "per_channel.rs",
        "bn_per_channel_grad_input",
        &[
            (V, "s6_grad_input_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        7,
        "layout.rs",
        "reassoc_fwd",
        &[
            (L, "reassoc_is_identity_on_flat_offsets"),
            (L, "index_round_trips_are_identities"),
            (L, "gather_scatter_adjoint"),
        ],
    ),
    (
        8,
        "layout.rs",
        "reassoc_back",
        &[
            (L, "reassoc_is_identity_on_flat_offsets"),
            (L, "index_round_trips_are_identities"),
            (L, "gather_scatter_adjoint"),
        ],
    ),
    (
        9,
        "layout.rs",
        "tensor3_to_mat",
        &[(L, "data_round_trips_are_identities")],
    ),
    (
        10,
        "layout.rs",
        "mat_to_tensor3",
        &[(L, "data_round_trips_are_identities")],
    ),
    (
        11,
        "channel.rs",
        "bn_eval",
        &[(L, "eval_with_batch_stats_equals_forward")],
    ),
    (
        12,
        "per_channel.rs",
        "bn_per_channel_eval",
        &[
            (L, "eval_with_batch_stats_equals_forward"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        13,
        "per_channel.rs",
        "bn_per_channel_eval_flat",
        &[
            (L, "eval_with_batch_stats_equals_forward"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        14,
        "per_channel.rs",
        "bn_per_channel_eval_tensor3",
        &[
            (L, "eval_with_batch_stats_equals_forward"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        15,
        "per_channel.rs",
        "bn_per_channel_grad_gamma",
        &[
            (V, "dgamma_dbeta_equal_jacobian_wrt_gamma_beta"),
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_backward_on_shards_equals_global_slice"),
            (S, "negative_shard_local_dgamma_differs_from_sync"),
        ],
    ),
    (
        16,
        "per_channel.rs",
        "bn_per_channel_grad_beta",
        &[
            (V, "dgamma_dbeta_equal_jacobian_wrt_gamma_beta"),
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_backward_on_shards_equals_global_slice"),
        ],
    ),
    (
        17,
        "layout.rs",
        "reindex_vjp",
        &[(L, "gather_scatter_adjoint")],
    ),
    (
        18,
        "per_channel.rs",
        "bn_per_channel_tensor3",
        &[
            (V, "tensor3_backward_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        19,
        "per_channel.rs",
        "bn_per_channel_tensor3_vjp",
        &[(V, "tensor3_backward_equals_jt_dy")],
    ),
    (
        20,
        "per_channel.rs",
        "bn_per_channel_tensor3_grad_input",
        &[
            (V, "tensor3_backward_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
        ],
    ),
    (
        21,
        "layout.rs",
        "bnchw_transpose_fwd",
        &[
            (L, "index_round_trips_are_identities"),
            (L, "gather_scatter_adjoint"),
        ],
    ),
    (
        22,
        "layout.rs",
        "bnchw_transpose_back",
        &[
            (L, "index_round_trips_are_identities"),
            (L, "gather_scatter_adjoint"),
        ],
    ),
    (
        23,
        "layout.rs",
        "bnchw_fwd",
        &[
            (L, "data_round_trips_are_identities"),
            (L, "gather_scatter_adjoint"),
        ],
    ),
    (
        24,
        "layout.rs",
        "bnchw_back",
        &[
            (L, "data_round_trips_are_identities"),
            (L, "gather_scatter_adjoint"),
        ],
    ),
    (
        25,
        "per_channel.rs",
        "bn_batch_tensor4",
        &[
            (V, "forward_jacobian_is_block_diagonal"),
            (V, "nchw_backward_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_forward_on_shards_equals_global_slice"),
        ],
    ),
    (
        26,
        "per_channel.rs",
        "sync_bn_batch_tensor4",
        &[
            (V, "sync_dgamma_equals_jacobian_of_sync_forward"),
            (L, "layout_ops_are_conjugated_flat_ops"),
            (L, "eval_with_batch_stats_equals_forward"),
            (S, "sync_forward_on_shards_equals_global_slice"),
        ],
    ),
    (
        27,
        "per_channel.rs",
        "bn_batch_tensor4_vjp",
        &[(V, "nchw_backward_equals_jt_dy")],
    ),
    (
        28,
        "per_channel.rs",
        "bn_batch_tensor4_grad_input",
        &[
            (V, "nchw_backward_equals_jt_dy"),
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_backward_on_shards_equals_global_slice"),
        ],
    ),
    (
        29,
        "per_channel.rs",
        "sync_bn_per_channel_grad_input",
        &[
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_backward_on_shards_equals_global_slice"),
        ],
    ),
    (
        30,
        "per_channel.rs",
        "sync_bn_per_channel_grad_gamma",
        &[
            (V, "sync_dgamma_equals_jacobian_of_sync_forward"),
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_backward_on_shards_equals_global_slice"),
            (S, "negative_shard_local_dgamma_differs_from_sync"),
        ],
    ),
    (
        31,
        "per_channel.rs",
        "sync_bn_batch_tensor4_grad_input",
        &[
            (L, "layout_ops_are_conjugated_flat_ops"),
            (S, "sync_backward_on_shards_equals_global_slice"),
        ],
    ),
];

fn property_file(name: &str) -> &'static str {
    match name {
        V => include_str!("properties_vjp.rs"),
        L => include_str!("properties_layout.rs"),
        S => include_str!("properties_sync.rs"),
        _ => panic!("unknown property file {name}"),
    }
}

fn spec_file(name: &str) -> &'static str {
    match name {
        "per_channel.rs" => include_str!("../src/per_channel.rs"),
        "layout.rs" => include_str!("../src/layout.rs"),
        "channel.rs" => include_str!("../src/channel.rs"),
        _ => panic!("unknown spec file {name}"),
    }
}

/// The text of test `name` in `src`: from `fn name(` to the next `#[test]` (or the end).
fn test_body<'a>(src: &'a str, name: &str) -> Option<&'a str> {
    let start = src.find(&format!("fn {name}("))?;
    let rest = &src[start..];
    let end = rest.find("#[test]").unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Whether `text` calls `ident` (as `ident(`, `ident::<`, or passes it as a function).
fn calls(text: &str, ident: &str) -> bool {
    text.match_indices(ident).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + ident.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && matches!(after, Some('(') | Some(':') | Some(')') | Some(','))
    })
}

/// The doc comment (and attributes) right above `pub fn ident`.
fn doc_of(src: &str, ident: &str) -> Option<String> {
    let lines: Vec<&str> = src.lines().collect();
    let at = lines.iter().position(|l| {
        let l = l.trim_start();
        l.starts_with(&format!("pub fn {ident}(")) || l.starts_with(&format!("pub fn {ident}<"))
    })?;
    let mut doc = Vec::new();
    for l in lines[..at].iter().rev() {
        let t = l.trim_start();
        if t.starts_with("///") || t.starts_with("#[") {
            doc.push(t);
        } else {
            break;
        }
    }
    doc.reverse();
    Some(doc.join("\n"))
}

#[test]
fn every_seed_item_is_exercised_by_a_property() {
    let mut problems = Vec::new();
    let items: Vec<u32> = COVERAGE.iter().map(|e| e.0).collect();
    if items != (1..=31).collect::<Vec<_>>() {
        problems.push(format!(
            "the table must list S1..S31 once each, in order; it lists {items:?}"
        ));
    }
    for &(item, file, ident, props) in COVERAGE {
        match doc_of(spec_file(file), ident) {
            None => problems.push(format!("S{item}: no `pub fn {ident}` in spec/src/{file}")),
            Some(doc) if !doc.contains(&format!("**S{item}**")) => problems.push(format!(
                "S{item}: the doc of `{ident}` in spec/src/{file} does not name **S{item}**"
            )),
            Some(_) => {}
        }
        if props.is_empty() {
            problems.push(format!("S{item} ({ident}): no property exercises it"));
        }
        for &(pfile, test) in props {
            match test_body(property_file(pfile), test) {
                None => problems.push(format!("S{item}: no test `{test}` in {pfile}")),
                Some(body) if !calls(body, ident) => problems.push(format!(
                    "S{item}: test `{test}` in {pfile} does not call `{ident}`"
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "seed coverage:\n  {}",
        problems.join("\n  ")
    );
}
