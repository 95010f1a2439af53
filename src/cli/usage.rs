//! `ebb usage` and `ebb prices`: what each team, program and profile used and spent, as a
//! table, CSV or JSON; and the price table.

use reqwest::Method;

use super::args::{PricesCmd, UsageArgs};
use super::client::{CliError, Client, read_answer};
use super::output::{self, out, table};
use crate::model::usage::{UsageFigures, UsageReport};

/// Runs by these statuses get a column each.
const OUTCOMES: [&str; 4] = ["COMPLETED", "FAILED", "KILLED", "REJECTED"];

pub fn usage(client: &Client, json: bool, args: UsageArgs) -> Result<(), CliError> {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in [
        ("namespace", &args.namespace),
        ("app", &args.app),
        ("program", &args.program),
        ("profile", &args.profile),
        ("provisioner", &args.provisioner),
        ("from", &args.from),
        ("to", &args.to),
        ("groupBy", &args.group_by),
    ] {
        if let Some(v) = value {
            query.append_pair(name, v);
        }
    }
    let v = client.get(&format!("/v3/usage?{}", query.finish()))?;
    let format = match (json, args.format.as_str()) {
        (true, _) | (_, "json") => {
            output::json(&v);
            return Ok(());
        }
        (_, f @ ("table" | "csv")) => f,
        (_, other) => {
            return Err(CliError::Usage(format!(
                "--format: {other:?} is not one of table, csv, json"
            )));
        }
    };
    let report: UsageReport = read_answer(v)?;
    let mut header: Vec<String> = report
        .group_by
        .iter()
        .map(|d| d.name().to_string())
        .collect();
    header.extend(
        [
            "completed",
            "failed",
            "killed",
            "rejected",
            "node_hours",
            "program_node_hours",
            "kept_node_hours",
            "idle_node_hours",
            "pool_node_hours",
            "cost",
            "unpriced_node_hours",
        ]
        .map(String::from),
    );
    let mut rows: Vec<Vec<String>> = report
        .groups
        .iter()
        .map(|g| {
            let mut row: Vec<String> = report
                .group_by
                .iter()
                .map(|d| g.key.get(d.name()).cloned().unwrap_or_default())
                .collect();
            row.extend(figures(&g.figures));
            row
        })
        .collect();
    if format == "csv" {
        let mut w = csv::Writer::from_writer(Vec::new());
        let failed = |e: csv::Error| CliError::Usage(format!("cannot write CSV: {e}"));
        w.write_record(&header).map_err(failed)?;
        for row in &rows {
            w.write_record(row).map_err(failed)?;
        }
        let bytes = w
            .into_inner()
            .map_err(|e| CliError::Usage(format!("cannot write CSV: {e}")))?;
        output::emit(String::from_utf8_lossy(&bytes).trim_end());
        return Ok(());
    }
    let mut total = vec![String::new(); report.group_by.len()];
    if let Some(first) = total.first_mut() {
        *first = "TOTAL".into();
    }
    total.extend(figures(&report.total));
    rows.push(total);
    let header: Vec<String> = header.iter().map(|h| h.to_ascii_uppercase()).collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&header, &rows);
    out!(
        "{} to {} (UTC days, the last not counted); cost in {}{}",
        report.from,
        report.to,
        report.currency,
        if report.total.unpriced_node_seconds > 0 {
            "; some node time has no known price: its cost is not in the figures"
        } else {
            ""
        }
    );
    Ok(())
}

/// A group's figures as columns: runs by outcome, node-hours, cost.
fn figures(f: &UsageFigures) -> Vec<String> {
    let hours = |s: u64| format!("{:.3}", s as f64 / 3600.0);
    let mut row: Vec<String> = OUTCOMES
        .iter()
        .map(|o| f.runs.get(*o).copied().unwrap_or(0).to_string())
        .collect();
    row.extend([
        format!("{:.3}", f.node_hours),
        hours(f.program_node_seconds),
        hours(f.kept_node_seconds),
        hours(f.idle_node_seconds),
        hours(f.pool_node_seconds),
        f.cost
            .map_or_else(|| "unknown".into(), |c| format!("{c:.2}")),
        hours(f.unpriced_node_seconds),
    ]);
    row
}

pub fn prices(client: &Client, json: bool, cmd: PricesCmd) -> Result<(), CliError> {
    let v = match cmd {
        PricesCmd::Get => client.get("/v3/prices")?,
        PricesCmd::Set { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", file.display())))?;
            let body: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| CliError::Usage(format!("{} is not JSON: {e}", file.display())))?;
            client.call(Method::PUT, "/v3/prices", Some(&body))?
        }
    };
    if json {
        output::json(&v);
        return Ok(());
    }
    let t: crate::model::price::PriceTable = read_answer(v)?;
    let rows: Vec<Vec<String>> = t
        .prices
        .iter()
        .map(|p| {
            vec![
                p.provisioner.clone(),
                p.machine_type.clone(),
                p.zone.clone().unwrap_or_else(|| "any".into()),
                p.market.clone(),
                format!("{}", p.per_hour),
            ]
        })
        .collect();
    table(
        &["PROVISIONER", "MACHINE TYPE", "ZONE", "MARKET", "PER HOUR"],
        &rows,
    );
    out!(
        "{} per node-hour, taken {}{}",
        t.currency,
        t.taken,
        if t.source.is_empty() {
            String::new()
        } else {
            format!(" ({})", t.source)
        }
    );
    Ok(())
}
