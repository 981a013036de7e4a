//! Medians over rounds, the markdown tables and the SVG chart.

use std::fmt::Write as _;

use crate::servers::Kind;
use crate::workloads::{Counts, Load, RunResult, Workload};

/// All rounds of one workload on one server.
pub struct Series {
    pub kind: Kind,
    pub tput: Vec<f64>,
    pub p50: Vec<f64>,
    pub p99: Vec<f64>,
    pub p999: Vec<f64>,
    /// Summed over the rounds; the first error of the first round that had one.
    pub counts: Counts,
}

impl Series {
    pub fn new(kind: Kind) -> Series {
        Series {
            kind,
            tput: Vec::new(),
            p50: Vec::new(),
            p99: Vec::new(),
            p999: Vec::new(),
            counts: Counts::default(),
        }
    }

    pub fn add(&mut self, r: &RunResult) {
        self.tput.push(r.throughput());
        if !r.hist.is_empty() {
            self.p50.push(r.hist.value_at_quantile(0.50) as f64);
            self.p99.push(r.hist.value_at_quantile(0.99) as f64);
            self.p999.push(r.hist.value_at_quantile(0.999) as f64);
        }
        self.counts.add(&r.counts);
    }

    pub fn tput_median(&self) -> f64 {
        median(&self.tput)
    }
}

pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The result of one workload under one fsync policy.
pub struct WorkloadResult {
    pub fsync: String,
    pub workload: Workload,
    pub series: Vec<Series>,
}

impl WorkloadResult {
    pub fn get(&self, kind: Kind) -> Option<&Series> {
        self.series.iter().find(|s| s.kind == kind)
    }

    /// flockd/Redis throughput ratio of the medians.
    pub fn ratio(&self) -> Option<f64> {
        let f = self.get(Kind::Flockd)?.tput_median();
        let r = self.get(Kind::Redis)?.tput_median();
        (r > 0.0).then(|| f / r)
    }
}

pub fn fmt_int(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "n/a".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

fn notes(w: &Workload, s: &Series) -> String {
    let s = &s.counts;
    let mut parts: Vec<String> = Vec::new();
    match w.load {
        Load::Acquire { .. } => {
            parts.push(format!("granted {}", pct(s.grants, s.grants + s.nulls)))
        }
        Load::Cycle { .. } => parts.push(format!("name busy {}", pct(s.nulls, s.grants + s.nulls))),
        Load::Contention { .. } => {
            let cycles = s.grants + s.nulls;
            if cycles > 0 {
                parts.push(format!(
                    "{:.1} acquire req/cycle",
                    s.attempts as f64 / cycles as f64
                ));
            }
            parts.push(format!("wait ran out {}", s.nulls));
        }
        Load::Ping | Load::Read { .. } => {}
    }
    if s.lost > 0 {
        parts.push(format!("lost lease {}", s.lost));
    }
    if s.errors > 0 {
        parts.push(format!("**errors {}**", s.errors));
    }
    parts.join("; ")
}

pub fn describe(w: &Workload) -> String {
    match &w.load {
        Load::Read { names } => format!(
            "FLOCK.TOKEN, random of {} names, {} conns",
            fmt_int(*names as f64),
            w.conns
        ),
        Load::Acquire {
            names,
            lease_ms,
            pipeline,
        } => format!(
            "acquire, random of {} names, lease {lease_ms} ms, {} conns, pipeline {pipeline}",
            fmt_int(*names as f64),
            w.conns
        ),
        Load::Cycle {
            names,
            lease_ms,
            shared: false,
        } => format!(
            "acquire+release cycle, random of {} names, lease {lease_ms} ms, {} conns",
            fmt_int(*names as f64),
            w.conns
        ),
        Load::Cycle {
            names,
            lease_ms,
            shared: true,
        } => format!(
            "read-lock acquire+release cycle, random of {} names, lease {lease_ms} ms, {} conns; \
             flockd SHARED, Redis the RedissonReadLock scripts",
            fmt_int(*names as f64),
            w.conns
        ),
        Load::Contention {
            names,
            lease_ms,
            wait_ms,
            backoff_min_ms,
            backoff_max_ms,
        } => format!(
            "contention: {} conns on {names} names, lease {lease_ms} ms; flockd WAIT {wait_ms}, \
             Redis retry every {backoff_min_ms}-{backoff_max_ms} ms for up to {wait_ms} ms; then release",
            w.conns
        ),
        Load::Ping => format!("PING, {} conns, unpipelined", w.conns),
    }
}

/// The main table for one fsync policy.
pub fn policy_table(fsync: &str, outcomes: &[&WorkloadResult]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "#### appendfsync {fsync}\n");
    md.push_str(
        "| workload | server | ops/s (median) | rounds min-max | p50 µs | p99 µs | p99.9 µs | flockd/Redis | notes |\n",
    );
    md.push_str("|---|---|--:|--:|--:|--:|--:|--:|---|\n");
    for o in outcomes {
        for s in &o.series {
            let ratio = match (s.kind, o.ratio()) {
                (Kind::Flockd, Some(r)) => format!("**{r:.2}x**"),
                _ => String::new(),
            };
            let (lo, hi) = s.tput.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
            let _ = writeln!(
                md,
                "| {} | {} | {} | {}-{} | {} | {} | {} | {} | {} |",
                o.workload.title,
                s.kind.label(),
                fmt_int(s.tput_median()),
                fmt_int(lo),
                fmt_int(hi),
                fmt_int(median(&s.p50)),
                fmt_int(median(&s.p99)),
                fmt_int(median(&s.p999)),
                ratio,
                notes(&o.workload, s)
            );
        }
    }
    md
}

pub fn sweep_table(fsync: &str, points: &[(usize, WorkloadResult)]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "#### Client-count sweep: workload 1 unpipelined, appendfsync {fsync}\n"
    );
    md.push_str("| connections | flockd ops/s | Redis+Lua ops/s | flockd/Redis | flockd p99 µs | Redis p99 µs |\n");
    md.push_str("|--:|--:|--:|--:|--:|--:|\n");
    for (conns, o) in points {
        let t = |k| o.get(k).map(|s| s.tput_median()).unwrap_or(f64::NAN);
        let p = |k| o.get(k).map(|s| median(&s.p99)).unwrap_or(f64::NAN);
        let _ = writeln!(
            md,
            "| {conns} | {} | {} | {} | {} | {} |",
            fmt_int(t(Kind::Flockd)),
            fmt_int(t(Kind::Redis)),
            o.ratio().map(|r| format!("{r:.2}x")).unwrap_or_default(),
            fmt_int(p(Kind::Flockd)),
            fmt_int(p(Kind::Redis)),
        );
    }
    md
}

fn nice_step(max: f64) -> f64 {
    let raw = (max / 5.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if raw <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Throughput vs connections, one line per server, log-scaled x axis.
pub fn svg_chart(title: &str, points: &[(usize, WorkloadResult)]) -> String {
    let (w, h) = (760.0, 440.0);
    let (left, right, top, bottom) = (90.0, 30.0, 60.0, 70.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let xs: Vec<f64> = points.iter().map(|(c, _)| *c as f64).collect();
    let xmin = xs.iter().cloned().fold(f64::INFINITY, f64::min).max(1.0);
    let xmax = xs.iter().cloned().fold(0.0, f64::max).max(xmin * 2.0);
    let ymax_data = points
        .iter()
        .flat_map(|(_, o)| o.series.iter().map(|s| s.tput_median()))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let step = nice_step(ymax_data * 1.1);
    let ymax = ((ymax_data * 1.1) / step).ceil().max(1.0) * step;
    let px = |x: f64| left + pw * (x.ln() - xmin.ln()) / (xmax.ln() - xmin.ln());
    let py = |y: f64| top + ph * (1.0 - y / ymax);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        w / 2.0,
        xml_escape(title)
    );
    // Y grid and labels.
    let mut y = 0.0;
    while y <= ymax + step / 2.0 {
        let yy = py(y);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/>"##,
            left + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 8.0,
            yy + 4.0,
            fmt_int(y)
        );
        y += step;
    }
    // X ticks at the measured client counts.
    for &x in &xs {
        let xx = px(x);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/>"##,
            top + ph
        );
        let _ = writeln!(
            s,
            r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            top + ph + 20.0,
            x as u64
        );
    }
    // Axes.
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>"#,
        top + ph
    );
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"#,
        top + ph,
        left + pw,
        top + ph
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">client connections (log scale)</text>"#,
        left + pw / 2.0,
        h - 22.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">acquires per second (median of rounds)</text>"#,
        top + ph / 2.0
    );
    // Lines.
    let colors = [(Kind::Flockd, "#1f77b4"), (Kind::Redis, "#d62728")];
    for (li, (kind, color)) in colors.iter().enumerate() {
        let pts: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|(c, o)| {
                let v = o.get(*kind)?.tput_median();
                v.is_finite().then(|| (px(*c as f64), py(v)))
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2.5"/>"#,
            path.join(" ")
        );
        for (x, y) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{color}"/>"#
            );
        }
        // Legend, top left inside the plot.
        let ly = top + 18.0 + 22.0 * li as f64;
        let lx = left + 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{color}" stroke-width="2.5"/>"#,
            lx + 28.0
        );
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{ly}" r="4" fill="{color}"/>"#,
            lx + 14.0
        );
        let label = match kind {
            Kind::Flockd => "flockd (FLOCK.ACQUIRE)",
            Kind::Redis => "Redis + Lua (Redisson fenced-lock script, EVALSHA)",
        };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 36.0,
            ly + 4.0,
            xml_escape(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn thousands() {
        assert_eq!(fmt_int(1234567.4), "1,234,567");
        assert_eq!(fmt_int(999.0), "999");
        assert_eq!(fmt_int(f64::NAN), "n/a");
    }

    #[test]
    fn steps_are_nice() {
        assert_eq!(nice_step(50_000.0), 10_000.0);
        assert_eq!(nice_step(120_000.0), 25_000.0);
    }
}
