//! The report's arithmetic and tables on made-up phases.

use super::*;

/// A voxgate phase whose process grew by `growth` bytes over its fresh start.
fn voxgate_phase(sessions: usize, growth: f64) -> PathPhase {
    PathPhase {
        path: Path::Voxgate.name(),
        sessions,
        rtt: Summary::default(),
        lag: Summary::default(),
        sent: 1,
        received: 1,
        late: 0,
        after_window: 0,
        expected: 1,
        failed_sessions: 0,
        window_s: 1.0,
        target_cpu_s: Some(0.1),
        echo_cpu_s: 0.1,
        generator_cpu_s: 0.1,
        machine_busy_cores: 0.1,
        rss_per_active: Some(growth / sessions as f64),
        tools_under_load: None,
        rounds_cpu_per_10k: vec![0.1 * 10_000.0 / 2.0],
        rounds_echo_per_10k: vec![0.1 * 10_000.0 / 2.0],
        rounds_thread_sessions: Vec::new(),
        rtt_samples: Vec::new(),
        lag_samples: Vec::new(),
    }
}

/// A phase of `path` whose process spent `cpu_s` on its two frames (`voxgate_phase`'s).
fn cpu_phase(path: Path, sessions: usize, cpu_s: f64) -> PathPhase {
    let mut phase = voxgate_phase(sessions, 0.0);
    phase.path = path.name();
    phase.target_cpu_s = Some(cpu_s);
    phase.rounds_cpu_per_10k = vec![cpu_s / 2.0 * 10_000.0];
    phase
}

fn report(phases: Vec<PathPhase>) -> Report {
    Report {
        started: Instant::now(),
        machine: String::new(),
        frame_bytes: 0,
        options: String::new(),
        threads: 2,
        session_threads: None,
        phases,
        tools: Vec::new(),
        idle: Vec::new(),
        capacity: Vec::new(),
        capacity_limit_ms: 50.0,
        capacity_found: Vec::new(),
        fsync: None,
        fsync_spaced: None,
        errors: Vec::new(),
        warnings: Vec::new(),
        elapsed_s: 0.0,
    }
}

#[test]
fn the_first_sessions_one_time_growth_is_not_spread_over_the_others() {
    // 1 MiB of one-time set-up with the first session, then 40 KiB per session.
    let once = 1024.0 * 1024.0;
    let per = 40.0 * 1024.0;
    let run = report(vec![voxgate_phase(1, once + per), voxgate_phase(100, once + 100.0 * per)]);
    let beyond = run.rss_beyond_first(Path::Voxgate.name(), 100).expect("an N = 1 phase is there");
    assert!((beyond - per).abs() < 1.0, "{beyond}");
    // Growth ÷ N carries a hundredth of the set-up on every session.
    assert!(run.phases[1].rss_per_active.is_some_and(|p| (p - (per + once / 100.0)).abs() < 1.0));
    let table = run.markdown();
    // No relay phase in this run: its cells are dashes.
    assert!(table.contains("| — / 50.2 KiB | — / 40.0 KiB |"), "{table}");
    // Without an N = 1 phase there is nothing to subtract.
    assert_eq!(report(vec![voxgate_phase(100, once)]).rss_beyond_first(Path::Voxgate.name(), 100), None);
    assert_eq!(run.rss_beyond_first(Path::Voxgate.name(), 1), None);
}

#[test]
fn cpu_ratios_are_given_round_by_round_beside_the_pooled_one() {
    let mut run = report(Vec::new());
    // Round 1: relay 0.10 s, voxgate 0.11 s; round 2 on a machine gone slower: 0.20 and 0.24.
    for (relay, voxgate) in [(0.10, 0.11), (0.20, 0.24)] {
        run.add_phase(cpu_phase(Path::Relay, 100, relay));
        run.add_phase(cpu_phase(Path::Voxgate, 100, voxgate));
    }
    let rounded: Vec<f64> = run.cpu_round_ratios(100).iter().map(|r| (r * 100.0).round() / 100.0).collect();
    assert_eq!(rounded, vec![1.10, 1.20]);
    let table = run.markdown();
    // The echo spent the same in every phase: its control ratio is 1.
    assert!(table.contains("| 100 | 1.10×, 1.20× | 1.15× | 1.10× – 1.20× | 1.00× | 1.00× – 1.00× |"), "{table}");
    // The pooled ratio weighs the slow round more: 0.35 s against 0.30 s.
    assert!(table.contains("| 1.17× |"), "{table}");
    let per_round: Vec<f64> = run.json()["phases"][1]["rounds_cpu_per_10k"]
        .as_array()
        .map(|rounds| rounds.iter().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default();
    assert!(per_round.len() == 2 && (per_round[0] - 550.0).abs() < 1e-6 && (per_round[1] - 1200.0).abs() < 1e-6, "{per_round:?}");
    // One round has no spread to show.
    let single = report(vec![cpu_phase(Path::Relay, 100, 0.1), cpu_phase(Path::Voxgate, 100, 0.1)]);
    assert!(single.cpu_round_ratios(100).is_empty());
    assert!(!single.markdown().contains("round by round"));
}

#[test]
fn the_echo_s_ratio_in_the_same_rounds_is_the_control() {
    let mut run = report(Vec::new());
    // The echo's work is the same on both paths; in round 2 it cost 10 % more in voxgate's phase,
    // and in round 3 5 % less: the machine moved, not voxgate.
    for echo in [1.0, 1.1, 0.95] {
        let relay = cpu_phase(Path::Relay, 100, 0.1);
        let mut voxgate = cpu_phase(Path::Voxgate, 100, 0.11);
        voxgate.rounds_echo_per_10k = vec![relay.rounds_echo_per_10k[0] * echo];
        run.add_phase(relay);
        run.add_phase(voxgate);
    }
    let echo: Vec<f64> = run.echo_round_ratios(100).iter().map(|r| (r * 100.0).round() / 100.0).collect();
    assert_eq!(echo, vec![1.0, 1.1, 0.95]);
    let table = run.markdown();
    assert!(table.contains("| 1.10×, 1.10×, 1.10× | 1.10× | 1.10× – 1.10× | 1.00× | 0.95× – 1.10× |"), "{table}");
    let json = run.json();
    assert_eq!(json["phases"][1]["rounds_echo_cpu_per_10k"].as_array().map(Vec::len), Some(3));
}

/// A phase of `path` whose round trips were all `p99_ms`.
fn latency_phase(path: Path, p99_ms: f64) -> PathPhase {
    let mut phase = cpu_phase(path, 100, 0.1);
    let us = (p99_ms * 1000.0) as u32;
    phase.rtt = Summary { count: 1, p50: p99_ms, p99: p99_ms, p999: p99_ms, max: p99_ms };
    phase.rtt_samples = vec![us];
    phase
}

#[test]
fn no_added_latency_ratio_over_a_relay_that_added_next_to_nothing() {
    // The relay's p99 fell under direct's by noise: (0.31 − 0.30) ÷ (0.29 − 0.30) would read −1×, "met".
    let run = report(vec![latency_phase(Path::Direct, 0.30), latency_phase(Path::Relay, 0.29), latency_phase(Path::Voxgate, 0.31)]);
    let table = run.markdown();
    assert!(table.contains("| 100 | — | — | — |"), "{table}");
    // 10 µs added by the relay: still under the floor.
    let run = report(vec![latency_phase(Path::Direct, 0.30), latency_phase(Path::Relay, 0.31), latency_phase(Path::Voxgate, 0.35)]);
    assert!(run.markdown().contains("| 100 | — | — | — |"));
    // 100 µs: a ratio.
    let run = report(vec![latency_phase(Path::Direct, 0.30), latency_phase(Path::Relay, 0.40), latency_phase(Path::Voxgate, 0.42)]);
    assert!(run.markdown().contains("| 100 | 1.20× | 1.20× | 1.20× |"), "{}", run.markdown());
}

#[test]
fn rounds_alternate_so_neither_server_always_runs_first() {
    let paths = [Path::Direct, Path::Relay, Path::Voxgate];
    assert_eq!(crate::run::round_order(&paths, 0), vec![Path::Direct, Path::Relay, Path::Voxgate]);
    assert_eq!(crate::run::round_order(&paths, 1), vec![Path::Voxgate, Path::Relay, Path::Direct]);
    assert_eq!(crate::run::round_order(&paths, 2), paths.to_vec());
    // With the Python relay the relay and voxgate stay back to back, each first in one round of two.
    let four = [Path::Direct, Path::Relay, Path::Voxgate, Path::Python];
    for round in 0..2 {
        let order = crate::run::round_order(&four, round);
        let (r, v) = (order.iter().position(|&p| p == Path::Relay), order.iter().position(|&p| p == Path::Voxgate));
        assert!(r.zip(v).is_some_and(|(r, v)| r.abs_diff(v) == 1), "{order:?}");
        assert_eq!(r < v, round == 0, "{order:?}");
    }
}

#[test]
fn sessions_per_thread_and_thread_counts_are_in_the_tables_and_the_json() {
    let mut run = report(Vec::new());
    for counts in [vec![50, 50], vec![51, 49]] {
        let mut voxgate = cpu_phase(Path::Voxgate, 100, 0.1);
        voxgate.rounds_thread_sessions = vec![counts];
        run.add_phase(voxgate);
    }
    run.warnings.push("voxgate N=100: sessions per thread [90, 10]".into());
    let table = run.markdown();
    assert!(table.contains("| 100 | voxgate | 2 | 50 / 50; 51 / 49 |"), "{table}");
    assert!(table.contains("| bare relay (2 thr.) | voxgate (2 thr.) |"), "{table}");
    assert!(table.contains("WARNING: voxgate N=100: sessions per thread [90, 10]"), "{table}");
    let json = run.json();
    assert_eq!(json["relay_threads"], 2);
    assert_eq!(json["phases"][0]["rounds_thread_sessions"][1][0], 51);
    assert_eq!(json["warnings"].as_array().map(Vec::len), Some(1));
    // Warnings are no broken behaviour: the run still exits 0.
    assert!(run.broken().is_empty());
}

#[test]
fn late_echoes_are_timed_and_lost_frames_count_as_infinite() {
    // 100 frames sent: 97 back in time (1 ms), 2 late (5 s), 1 lost.
    let result = crate::load::PhaseResult {
        rtt_us: std::iter::repeat_n(1_000, 97).chain([5_000_000, 5_000_000]).collect(),
        sent: 100,
        received: 97,
        late: 2,
        window: std::time::Duration::from_secs(1),
        ..Default::default()
    };
    let phase = PathPhase::from_result(Path::Voxgate, 1, 100, 0, result, None);
    assert_eq!(phase.rtt.count, 100);
    assert_eq!(phase.rtt.p99, 5_000.0);
    assert_eq!(phase.rtt.max, f64::INFINITY);
    assert!(!phase.holds(50.0));
}

#[test]
fn cpu_per_frame_is_flagged_where_echoes_came_back_after_the_cpu_window() {
    // Both phases relayed 2 frames a round; voxgate's second echo came after the window.
    let mut voxgate = cpu_phase(Path::Voxgate, 100, 0.1);
    voxgate.after_window = 1;
    let run = report(vec![cpu_phase(Path::Relay, 100, 0.1), voxgate]);
    let table = run.markdown();
    assert!(table.contains("| 100 | 500.000 | 500.000 † |"), "{table}");
    assert!(table.contains("† More than 1 %"), "{table}");
    assert_eq!(run.json()["phases"][1]["cpu_window_backlogged"], true);
    let quiet = report(vec![cpu_phase(Path::Relay, 100, 0.1), cpu_phase(Path::Voxgate, 100, 0.1)]).markdown();
    assert!(quiet.contains("| 100 | 500.000 | 500.000 |") && !quiet.contains('†'), "{quiet}");
}
