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
        phases,
        tools: Vec::new(),
        idle: Vec::new(),
        capacity: Vec::new(),
        capacity_limit_ms: 50.0,
        capacity_found: Vec::new(),
        fsync: None,
        fsync_spaced: None,
        errors: Vec::new(),
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
