//! The kernel directory protocol for the `replicated` suite (docs/FORMAT.md, "Replicated
//! suites"): `DIR/<case>/case.json` is the whole case (with `ranks`, `shard_sizes`);
//! `DIR/<case>/rank<r>/` holds rank r's inputs (its rows of `x`/`dy`, copies of the
//! per-channel inputs) and `case.json` with `rank` and `shard_shape`; rank r writes
//! `rank<r>/out/<output>.npy`. Whole-batch inputs are not written.

use super::{case_value, kernel_case, npy_of, read_output, refusal, shape_of, verify_case_inputs};
use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::npy::write_npy;
use crate::judge::check::Written;
use crate::judge::prepare::Prepared;
use crate::judge::replicated::LOCAL_OUTPUTS;
use crate::suite::{replicated, Suite, SuiteCase};
use bnconf_spec::exact::round::FloatFormat;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The shape of output `name` in rank `r`'s directory: the case's, with the rank's rows for a
/// per-cell output (what `shape_of` gives for the rank's shard, without copying its inputs;
/// replicated ops have no per-shard outputs).
fn rank_shape(c: &SuiteCase, r: usize, name: &str) -> Vec<usize> {
    let mut s = shape_of(c, name);
    if matches!(
        bnconf_spec::op::Op::extent(name),
        bnconf_spec::op::Extent::Cells
    ) {
        s[0] = c.shard_sizes[r];
    }
    s
}

/// Rank r's directory of a case directory.
pub fn rank_dir(cd: &Path, r: usize) -> std::path::PathBuf {
    cd.join(format!("rank{r}"))
}

/// Write one replicated case into `cd`: the whole `case.json`, and per rank its directory.
pub fn export_case(c: &SuiteCase, cd: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(&c.protocol_json()).expect("json") + "\n";
    write_bytes(&cd.join("case.json"), text.as_bytes())?;
    for r in 0..c.shard_sizes.len() {
        let rd = rank_dir(cd, r);
        std::fs::create_dir_all(&rd).map_err(|e| ConfError::io(&rd, e))?;
        let sh = replicated::shard(c, r);
        let mut v = c.protocol_json();
        let o = v.as_object_mut().expect("object");
        o.insert("rank".into(), json!(r));
        o.insert("shard_shape".into(), json!(sh.shape));
        let text = serde_json::to_string_pretty(&v).expect("json") + "\n";
        write_bytes(&rd.join("case.json"), text.as_bytes())?;
        for (name, vals) in &sh.inputs {
            write_npy(
                &rd.join(format!("{name}.npy")),
                &shape_of(&sh, name),
                &npy_of(sh.dtype_of(name), vals),
            )?;
        }
    }
    Ok(())
}

/// Every rank's input files hold exactly its shard of the regenerated case.
pub fn verify_inputs(dir: &Path, s: &Suite, c: &SuiteCase) -> Result<()> {
    for r in 0..c.shard_sizes.len() {
        let sh = replicated::shard(c, r);
        let rel = format!("{}/rank{r}", c.id);
        verify_case_inputs(&rank_dir(&dir.join(&c.id), r), &rel, &sh.inputs, s)?;
    }
    Ok(())
}

/// Every rank's outputs of one case as written ([`Written::Ranks`], `ranks[r]`: output name →
/// values of its dtype as f64; the optional `dgamma_local`/`dbeta_local` where present), or
/// why not: `out/error` of the case or of any rank makes it a kernel error (not conforming),
/// `out/unsupported` unsupported — the first of them in the case's `out/`, then rank by rank;
/// a missing or malformed output, malformed.
pub fn read_written(dir: &Path, p: &Prepared) -> Written {
    let c = &p.case;
    let cd = dir.join(&c.id);
    let mut dirs = vec![(cd.join("out"), format!("{}/out", c.id))];
    dirs.extend((0..c.shard_sizes.len()).map(|r| {
        (
            rank_dir(&cd, r).join("out"),
            format!("{}/rank{r}/out", c.id),
        )
    }));
    for (out, rel) in &dirs {
        if let Some(w) = refusal(out, rel) {
            return w;
        }
    }
    let mut ranks = Vec::new();
    for r in 0..c.shard_sizes.len() {
        let out = rank_dir(&cd, r).join("out");
        let mut got = BTreeMap::new();
        for &name in c.op.outputs() {
            let rel = format!("{}/rank{r}/out/{name}.npy", c.id);
            match read_output(
                &out.join(format!("{name}.npy")),
                &rank_shape(c, r, name),
                c.dtype_of(name),
            ) {
                Ok(v) => {
                    got.insert(name.to_string(), v);
                }
                Err(why) => return Written::Malformed(format!("{rel}: {why}")),
            }
        }
        if p.locals.is_some() {
            for name in LOCAL_OUTPUTS {
                let path = out.join(format!("{name}.npy"));
                if path.symlink_metadata().is_err() {
                    continue; // optional
                }
                let rel = format!("{}/rank{r}/out/{name}.npy", c.id);
                match read_output(&path, &[c.inputs["gamma"].len()], c.dtype_of(name)) {
                    Ok(v) => {
                        got.insert(name.to_string(), v);
                    }
                    Err(why) => return Written::Malformed(format!("{rel}: {why}")),
                }
            }
        }
        ranks.push(got);
    }
    Written::Ranks(ranks)
}

/// `bnconf kernel NAME DIR` for a replicated kernel: every replicated case of DIR, each rank
/// read from `rank<r>/` and written to `rank<r>/out/` (the ranks simulated in this process,
/// their collectives in rank order). Other cases get `out/unsupported`. Returns the number
/// of cases visited.
pub fn run_kernel_dir(kernel: &dyn bnconf_impl::ReplicatedKernel, dir: &Path) -> Result<usize> {
    let ids = super::case_ids(dir)?;
    for id in &ids {
        let cd = dir.join(id);
        let v = case_value(&cd)?;
        let field = |k: &str, msg: &str| {
            ConfError::field(format!("{}: {k}", cd.join("case.json").display()), msg)
        };
        let Some(ranks) = v.get("ranks") else {
            let out = cd.join("out");
            std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
            let why = format!(
                "{} is a replicated kernel: it runs only cases split across ranks",
                kernel.name()
            );
            write_bytes(&out.join("unsupported"), why.as_bytes())?;
            continue;
        };
        let r_count = ranks
            .as_u64()
            .filter(|&r| (1..=1024).contains(&r))
            .ok_or_else(|| field("ranks", "must be an integer from 1 to 1024"))?
            as usize;
        let mut cases = Vec::with_capacity(r_count);
        for r in 0..r_count {
            let rd = rank_dir(&cd, r);
            let rv = case_value(&rd)?;
            if rv.get("rank").and_then(Value::as_u64) != Some(r as u64) {
                return Err(ConfError::field(
                    format!("{}: rank", rd.join("case.json").display()),
                    format!("missing or not {r}"),
                ));
            }
            cases.push(kernel_case(&rd, &rv, true)?);
        }
        match kernel.run_ranks(&cases) {
            Ok(outs) => {
                for (r, (res, case)) in outs.into_iter().zip(&cases).enumerate() {
                    let out = rank_dir(&cd, r).join("out");
                    std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
                    let c_len = case.inputs.get("gamma").or(case.inputs.get("running_mean"));
                    let c_len = c_len.map_or(0, Vec::len);
                    for (name, vals) in res {
                        let sh = if bnconf_spec::tensor::is_cell_array(&name) {
                            case.shape.clone()
                        } else {
                            vec![c_len]
                        };
                        let f = FloatFormat::from_name(case.dtype_of(&name).name())
                            .expect("same dtype names");
                        write_npy(&out.join(format!("{name}.npy")), &sh, &npy_of(f, &vals))?;
                    }
                }
            }
            Err(bnconf_impl::Unsupported(why)) => {
                let out = cd.join("out");
                std::fs::create_dir_all(&out).map_err(|e| ConfError::io(&out, e))?;
                write_bytes(&out.join("unsupported"), why.as_bytes())?
            }
        }
    }
    Ok(ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rank_shape` is `shape_of` of the rank's shard, for every output of every case of the
    /// replicated suite.
    #[test]
    fn rank_shapes_are_the_shards_shapes() {
        let s = crate::suite::test_suite("replicated", &[FloatFormat::F32]);
        let mut n = 0;
        for c in &s.cases {
            for r in 0..c.shard_sizes.len() {
                let sh = replicated::shard(c, r);
                for &name in c.op.outputs() {
                    assert_eq!(
                        rank_shape(c, r, name),
                        shape_of(&sh, name),
                        "{} rank {r} {name}",
                        c.id
                    );
                    n += 1;
                }
            }
        }
        assert!(n > 100, "{n}");
    }
}
