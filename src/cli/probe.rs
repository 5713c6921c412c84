//! `probe`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::{call, table, unexpected, CliError, Context, Named, ProbeArgs};
use crate::endpoint::EndpointId;
use crate::probe::run as probe_run;
use crate::protocol::ProbeReport;
use crate::protocol::{EndpointRef, Payload, ProbeMessage, Request};

pub(super) async fn probe(ctx: &Context, a: ProbeArgs) -> Result<(), CliError> {
    let ProbeArgs {
        endpoints: targets,
        all,
        pool,
        json: json_out,
        concurrency,
    } = a;
    if concurrency == 0 {
        return Err(CliError::usage("--concurrency must be >= 1"));
    }
    if targets.is_empty() && !all && pool.is_none() {
        let what = "name endpoints to probe, or use --all / --pool";
        return Err(CliError::usage(what));
    }
    if let Some(p) = &pool {
        ctx.check_pool(p)?;
    }
    let every_pool = targets.is_empty() && pool.is_none();
    // `--pool P` alone: a pool with nothing to probe is as unusable as a dead one, and
    // exits alike (1) instead of an empty table and 0.
    let whole_pool = pool.clone().filter(|_| targets.is_empty());
    // A pool without a probe target is bad usage however many endpoints it has (none
    // included): said before anything runs. A remote daemon's config is its own.
    if let (Some(p), None) = (&whole_pool, &ctx.remote) {
        let url = ctx.config.pools.get(p).and_then(|c| c.probe.url.as_ref());
        if url.is_none() {
            return Err(CliError::usage(probe_run::no_target(p)));
        }
    }
    let reports = match ctx.daemon().await? {
        Some(mut c) => {
            // The daemon owns the pool state: let it run the probes and apply the
            // results. A sweep of a large pool takes as long as it takes.
            c.set_timeout(Duration::from_secs(24 * 3600));
            let req = Request::Probe(ProbeMessage {
                endpoints: targets.into_iter().map(EndpointRef::Url).collect(),
                pool,
                all,
                concurrency: Some(concurrency),
            });
            let reports = match call(&mut c, &req).await? {
                Payload::Probes { results } => results,
                _ => return Err(unexpected("probe")),
            };
            if json_out {
                reports.iter().for_each(print_json);
            }
            reports
        }
        None => {
            in_process(
                ctx,
                &Named::new(&targets, &pool),
                every_pool,
                concurrency,
                json_out,
            )
            .await?
        }
    };
    if !json_out {
        print_table(&reports);
    }
    if every_pool {
        note_unprobed(ctx);
    }
    verdict(&reports, whole_pool.as_deref())
}

/// The exit status of a probe run: 1 when a probe failed, or when `--pool P` alone found
/// nothing to probe.
fn verdict(reports: &[ProbeReport], whole_pool: Option<&str>) -> Result<(), CliError> {
    if let (Some(p), true) = (whole_pool, reports.is_empty()) {
        return Err(CliError::failed(format!(
            "pool {p:?} has no endpoints: nothing was probed (add some with `proxypool add --pool {p} URL`)"
        )));
    }
    let failed = reports
        .iter()
        .filter(|r| !r.ok && r.skipped.is_none())
        .count();
    if failed > 0 {
        return Err(CliError::failed(format!(
            "{failed} of {} probes failed",
            reports.len()
        )));
    }
    Ok(())
}

/// No daemon: probe here and apply the results to the database, with a progress bar on
/// a terminal.
async fn in_process(
    ctx: &Context,
    named: &Named<'_>,
    every_pool: bool,
    concurrency: usize,
    json_out: bool,
) -> Result<Vec<ProbeReport>, CliError> {
    let engine = ctx.engine()?;
    let ids: Vec<EndpointId> = if named.args.is_empty() {
        engine.ids(named.pool)
    } else {
        ctx.resolve_ids(named)?
    };
    let probers = probe_run::probers(&ctx.config).map_err(|e| CliError::usage(e.to_string()))?;
    let ids =
        probe_run::probe_targets(&engine, &probers, ids, every_pool).map_err(CliError::usage)?;
    let bar = if std::io::stderr().is_terminal() && !json_out {
        let b = ProgressBar::new(ids.len() as u64);
        b.set_style(
            ProgressStyle::with_template("{spinner} probing [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let reports = probe_run::probe_many(&engine, &probers, ids, concurrency, |rep| {
        if json_out {
            print_json(rep);
        }
        bar.inc(1);
    })
    .await?;
    bar.finish_and_clear();
    engine.flush().await?;
    Ok(reports)
}

fn print_json(r: &ProbeReport) {
    outln!("{}", serde_json::to_string(r).unwrap_or_default());
}

fn print_table(reports: &[ProbeReport]) {
    let mut t = table([
        "ID", "URL", "RESULT", "REASON", "PHASE", "STATUS", "STATE", "TOTAL", "PHASES",
    ]);
    let dash = |x: Option<String>| x.unwrap_or_else(|| "-".into());
    for r in reports {
        t.add_row([
            r.id.to_string(),
            r.url.clone(),
            if r.skipped.is_some() {
                "skipped".into()
            } else if r.ok {
                "ok".into()
            } else {
                "FAILED".into()
            },
            dash(r.reason.map(|x| x.to_string())),
            dash(r.phase.map(|x| x.to_string())),
            dash(r.status.map(|x| x.to_string())),
            dash(r.state.map(|x| x.to_string())),
            format!("{:.0}ms", r.total_ms),
            r.phases_ms
                .iter()
                .map(|(p, ms)| format!("{p}={ms:.0}"))
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    outln!("{t}");
}

/// Said once, so that a sweep that passed over some pools is not read as "all ok".
fn note_unprobed(ctx: &Context) {
    let untested: Vec<&str> = ctx
        .config
        .pools
        .values()
        .filter(|p| p.probe.url.is_none())
        .map(|p| p.name.as_str())
        .collect();
    if !untested.is_empty() {
        eprintln!(
            "note: pools without [pool.probe] url are never probed: {}",
            untested.join(", ")
        );
    }
}
