//! Turns prometheus-client's OpenMetrics text into the classic Prometheus text format (0.0.4),
//! which CONTRACT §2 promises for `/metrics` and which every scraper, parser and `promtool check
//! metrics` reads.
//!
//! The two differ only in what voxgate emits here: OpenMetrics names a counter family without
//! `_total` (`# TYPE voxgate_sessions counter`, samples `voxgate_sessions_total`), has `# UNIT`
//! lines and ends with `# EOF`. Sample lines are the same in both.

/// The classic text for an OpenMetrics body produced by `prometheus_client::encoding::text`.
pub(crate) fn openmetrics_to_prometheus(openmetrics: &str) -> String {
    let lines: Vec<&str> = openmetrics.lines().collect();
    let mut out = String::with_capacity(openmetrics.len() + 256);
    for (i, line) in lines.iter().enumerate() {
        if *line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(family) = rest.strip_suffix(" counter")
        {
            out.push_str(&format!("# TYPE {} counter\n", total_name(family)));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // prometheus-client writes HELP right before TYPE; a counter's HELP takes the sample
            // name too, or Prometheus sees a family without samples and samples without help.
            let (family, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let next_is_counter = lines
                .get(i + 1)
                .is_some_and(|next| *next == format!("# TYPE {family} counter"));
            if next_is_counter {
                out.push_str(&format!("# HELP {} {help}\n", total_name(family)));
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn total_name(family: &str) -> String {
    if family.ends_with("_total") {
        family.to_owned()
    } else {
        format!("{family}_total")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_total_names_and_openmetrics_only_lines_go() {
        let openmetrics = "\
# HELP voxgate_sessions Sessions ended.
# TYPE voxgate_sessions counter
voxgate_sessions_total{outcome=\"drained\"} 2
# HELP voxgate_sessions_active Open.
# TYPE voxgate_sessions_active gauge
voxgate_sessions_active 1
# HELP voxgate_upstream_connect_seconds Connect.
# TYPE voxgate_upstream_connect_seconds histogram
# UNIT voxgate_upstream_connect_seconds seconds
voxgate_upstream_connect_seconds_sum 0.5
voxgate_upstream_connect_seconds_count 1
voxgate_upstream_connect_seconds_bucket{le=\"+Inf\"} 1
# EOF
";
        let expected = "\
# HELP voxgate_sessions_total Sessions ended.
# TYPE voxgate_sessions_total counter
voxgate_sessions_total{outcome=\"drained\"} 2
# HELP voxgate_sessions_active Open.
# TYPE voxgate_sessions_active gauge
voxgate_sessions_active 1
# HELP voxgate_upstream_connect_seconds Connect.
# TYPE voxgate_upstream_connect_seconds histogram
voxgate_upstream_connect_seconds_sum 0.5
voxgate_upstream_connect_seconds_count 1
voxgate_upstream_connect_seconds_bucket{le=\"+Inf\"} 1
";
        assert_eq!(openmetrics_to_prometheus(openmetrics), expected);
    }
}
