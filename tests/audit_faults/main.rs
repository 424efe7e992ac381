//! The audit log on a bad day, against the real binary (CONTRACT §5, §11; issue 18): a full disk
//! (a small tmpfs filled during calls) with `fail_closed` and `fail_open` ([`disk`]), `kill -9`
//! mid-batch and after a calendar write before its record ([`crash`]), a chain recomputed after an
//! edit under `audit.chain_key` ([`tamper`]), and a trace-level log that holds no transcript or
//! tool data ([`logs`]).

#[path = "../support/mod.rs"]
mod support;

mod crash;
mod disk;
mod helpers;
mod logs;
mod tamper;
