//! The guest benchmark runner of `cargo xtask bench-vm`:
//! `bench <smoke|quick|full> [--only bloom,bpf_loop,batch] [-p PRODUCERS] [--instruction-clock]
//! --out FILE`.
//! Prints progress lines on stdout and writes the results as JSON to FILE.
use anyhow::{bail, Context, Result};
use bpfvm_tests::bench::{self, parse_group, Plan};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut plan = None;
    let mut only = Vec::new();
    let mut out = None;
    let mut producers = 1;
    let mut instruction_clock = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--only" => {
                for g in args.next().context("--only needs a list")?.split(',') {
                    only.push(parse_group(g.trim())?);
                }
            }
            "-p" => {
                let p = args.next().context("-p needs a number of producers")?;
                producers = p
                    .parse()
                    .with_context(|| format!("-p {p}: not a number of producers"))?;
            }
            "--instruction-clock" => instruction_clock = true,
            "--out" => out = Some(args.next().context("--out needs a file")?),
            name if plan.is_none() && !name.starts_with('-') => plan = Some(name.to_string()),
            other => bail!("unexpected argument `{other}`"),
        }
    }
    let mut plan = Plan::named(plan.as_deref().unwrap_or("quick"), only)?;
    let cpus = aya::util::online_cpus().map_err(|(_, e)| e)?.len() as u32;
    if producers == 0 || producers > cpus {
        bail!("-p {producers}: between 1 and the guest's {cpus} CPUs (one producer per CPU)");
    }
    plan.producers = producers;
    if instruction_clock {
        plan.for_instruction_clock();
    }
    let out = out.context("--out FILE is required")?;
    let results = bench::run(&plan);
    let json = serde_json::to_string_pretty(&results)?;
    std::fs::write(&out, json + "\n").with_context(|| format!("write {out}"))?;
    for e in &results.errors {
        eprintln!("bench: {e}");
    }
    Ok(())
}
