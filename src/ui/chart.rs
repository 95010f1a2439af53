//! Charts of usage, drawn on the server as SVG by plotters: bars per period (day, week or
//! month), stacked by a dimension's values (the largest few, the rest as "other"), with the
//! budget as a line. Each chart comes with the table of its figures, for screen readers and
//! for copying.

use std::collections::BTreeMap;

use maud::{Markup, PreEscaped, html};
use plotters::prelude::*;

use crate::model::usage::{Dimension, UsageReport};

/// Most series a chart stacks; the rest are summed as "other".
const MAX_SERIES: usize = 7;
/// Most periods a chart spans (a year and a half of days).
const MAX_PERIODS: usize = 550;
/// Colours of the series (Okabe–Ito, distinguishable with colour-blindness), then "other".
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(153, 153, 153),
];

/// What a chart measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Cost,
    NodeHours,
}

impl Measure {
    fn of(self, f: &crate::model::usage::UsageFigures) -> f64 {
        match self {
            Measure::Cost => f.cost.unwrap_or(0.0),
            Measure::NodeHours => f.node_hours,
        }
    }

    fn unit(self, currency: &str) -> String {
        match self {
            Measure::Cost => currency.to_string(),
            Measure::NodeHours => "node-hours".to_string(),
        }
    }
}

/// The figures of a report as a grid: periods (in order) × series (largest first, then
/// "other").
struct Grid {
    periods: Vec<String>,
    series: Vec<String>,
    /// `values[series][period]`.
    values: Vec<Vec<f64>>,
}

fn grid(report: &UsageReport, time: Dimension, by: Option<Dimension>, measure: Measure) -> Grid {
    let mut cells: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    for g in &report.groups {
        let period = g.key.get(time.name()).cloned().unwrap_or_default();
        let series = by
            .and_then(|d| g.key.get(d.name()).cloned())
            .unwrap_or_else(|| "all".into());
        let v = measure.of(&g.figures);
        *cells.entry((series.clone(), period)).or_default() += v;
        *totals.entry(series).or_default() += v;
    }
    // Every period of the range, those without use too: the bars are a time line.
    let mut periods: std::collections::BTreeSet<String> =
        cells.keys().map(|(_, p)| p.clone()).collect();
    periods.extend(periods_of(report, time));
    let periods: Vec<String> = periods.into_iter().collect();
    let mut ranked: Vec<(String, f64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown: Vec<String> = ranked
        .iter()
        .take(MAX_SERIES)
        .map(|(s, _)| s.clone())
        .collect();
    let mut series = shown.clone();
    if ranked.len() > MAX_SERIES {
        series.push("other".into());
    }
    let mut values = vec![vec![0.0; periods.len()]; series.len()];
    for ((s, p), v) in cells {
        let row = shown
            .iter()
            .position(|x| *x == s)
            .unwrap_or(series.len() - 1);
        if let Some(col) = periods.iter().position(|x| *x == p) {
            values[row][col] += v;
        }
    }
    Grid {
        periods,
        series,
        values,
    }
}

/// The periods (of kind `time`) of `report`'s range, at most [`MAX_PERIODS`].
fn periods_of(report: &UsageReport, time: Dimension) -> Vec<String> {
    let (Ok(from), Ok(to)) = (
        report.from.parse::<jiff::civil::Date>(),
        report.to.parse::<jiff::civil::Date>(),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut day = from;
    while day < to && out.len() < MAX_PERIODS {
        let name = day.to_string();
        let period = match time {
            Dimension::Month => name[..7].to_string(),
            Dimension::Week => crate::rules::usage::week_of(&name),
            Dimension::Day
            | Dimension::Namespace
            | Dimension::App
            | Dimension::Program
            | Dimension::Profile
            | Dimension::Provisioner => name,
        };
        if out.last() != Some(&period) {
            out.push(period);
        }
        let Ok(next) = day.tomorrow() else { break };
        day = next;
    }
    out
}

/// The chart of `report` (grouped by `time` and maybe `by`), measuring `measure`, with
/// `budget` as a line, and its table; `label` says what it shows.
pub fn usage_chart(
    report: &UsageReport,
    (time, by): (Dimension, Option<Dimension>),
    measure: Measure,
    budget: Option<f64>,
    label: &str,
) -> Markup {
    let g = grid(report, time, by, measure);
    let unit = measure.unit(&report.currency);
    let svg = if report.groups.is_empty() || g.periods.is_empty() {
        None
    } else {
        draw(&g, &unit, budget).ok()
    };
    html! {
        figure.chart aria-labelledby="chart-caption" {
            @match svg {
                Some(svg) => div.svg role="img" aria-label=(label) { (PreEscaped(svg)) },
                None => p.muted { "Nothing was used in this range." },
            }
            figcaption #chart-caption { (label) " (" (unit) ")" @if let Some(b) = budget { "; the line is the monthly budget, " (format!("{b:.2}")) } }
        }
        table.wide.figures {
            caption.sr { (label) "; periods not listed used nothing" }
            thead { tr {
                th scope="col" { (time.name()) }
                @for s in &g.series { th scope="col" { (s) } }
                th scope="col" { "total" }
            } }
            tbody {
                @for (i, p) in g.periods.iter().enumerate().filter(|(i, _)| g.values.iter().any(|r| r[*i] != 0.0)) {
                    tr {
                        th scope="row" { (p) }
                        @for row in &g.values { td data-label=(unit) { (format!("{:.2}", row[i])) } }
                        td { (format!("{:.2}", g.values.iter().map(|r| r[i]).sum::<f64>())) }
                    }
                }
            }
        }
    }
}

/// The chart of a profile's use this month: its cost by day, or its node-hours when some
/// had no known price.
pub fn month_chart(report: &crate::model::usage::UsageReport) -> Markup {
    let (measure, what) = match report.total.unpriced_node_seconds {
        0 => (Measure::Cost, "Cost"),
        _ => (Measure::NodeHours, "Node-hours"),
    };
    let label = format!("{what} by day, {} to {}", report.from, report.to);
    usage_chart(
        report,
        (crate::model::usage::Dimension::Day, None),
        measure,
        None,
        &label,
    )
}

/// The SVG of grid `g`.
fn draw(g: &Grid, unit: &str, budget: Option<f64>) -> Result<String, String> {
    let n = g.periods.len();
    let stacked = (0..n)
        .map(|i| g.values.iter().map(|r| r[i]).sum::<f64>())
        .fold(0.0_f64, f64::max);
    let top = (stacked.max(budget.unwrap_or(0.0)) * 1.1).max(0.01);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 320)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..top)
            .map_err(|x| e(&x))?;
        let labels = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) => g.periods.get(*i).cloned().unwrap_or_default(),
            SegmentValue::Exact(_) | SegmentValue::Last => String::new(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_max_light_lines(0)
            .x_labels(n.min(10))
            .x_label_formatter(&labels)
            .y_desc(unit)
            .draw()
            .map_err(|x| e(&x))?;
        let mut base = vec![0.0; n];
        for (s, row) in g.values.iter().enumerate() {
            let colour = COLOURS[s.min(COLOURS.len() - 1)];
            let bars: Vec<_> = (0..n)
                .map(|i| {
                    let (y0, y1) = (base[i], base[i] + row[i]);
                    base[i] = y1;
                    let mut bar = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), y0),
                            (SegmentValue::Exact(i + 1), y1),
                        ],
                        colour.filled(),
                    );
                    bar.set_margin(0, 0, 3, 3);
                    bar
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(|x| e(&x))?
                .label(g.series[s].clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
        }
        if let Some(b) = budget {
            let line = PathElement::new(
                vec![(SegmentValue::Exact(0), b), (SegmentValue::Last, b)],
                RED.stroke_width(2),
            );
            chart
                .draw_series(std::iter::once(line))
                .map_err(|x| e(&x))?
                .label("budget")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], RED.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(svg)
}
