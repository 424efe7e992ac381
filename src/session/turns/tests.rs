//! The response gate, driven through its events with explicit instants.

use super::*;

fn id() -> String {
    "voxgate_r".into()
}

#[test]
fn a_replaced_upstream_forgets_its_response_and_owes_an_unanswered_request() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_some());
    gate.on_speech_started();
    assert!(!gate.is_quiet(now));
    gate.on_upstream_replaced();
    assert!(gate.is_quiet(now));
    assert_eq!(gate.try_request(now, id).as_deref(), Some("voxgate_r"), "the unanswered request is due again");

    let mut gate = ResponseGate::default();
    gate.on_response_created(Some("r"), false);
    gate.on_upstream_replaced();
    assert!(gate.is_quiet(now));
    // The outputs of a response that started and never ended are owed again.
    gate.on_output_sent(false);
    gate.try_request(now, id);
    gate.on_response_created(Some("r"), false);
    gate.on_upstream_replaced();
    assert!(gate.try_request(now, id).is_some(), "the response for the output is gone");

    // Within the grace after speech the server may still commit it and answer: not quiet.
    let mut gate = ResponseGate::default();
    gate.on_speech_started();
    gate.on_speech_stopped(now);
    assert!(!gate.is_quiet(now));
    assert!(gate.is_quiet(now + AFTER_SPEECH_GRACE));
    assert_eq!(gate.try_request(now, id), None, "nothing was owed");
}

/// Output A, voxgate's request for it, output B before the request's `response.created`: that
/// response covers A (B needs a turn of its own). Both are owed again if the upstream goes before
/// it ends.
#[test]
fn a_response_to_our_request_covers_its_outputs_though_another_arrived_meanwhile() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_some());
    gate.on_output_sent(false);
    gate.on_response_created(Some("r"), false);
    assert_eq!(gate.active, [("r".to_string(), 1)], "the response covers A");
    gate.on_upstream_replaced();
    assert!(gate.try_request(now, id).is_some());
    assert_eq!(gate.last_request, Some(("voxgate_r".to_string(), 2)), "A and B are owed again");
}

#[test]
fn one_request_for_a_batch_and_none_while_active() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    assert!(gate.try_request(now, id).is_none(), "nothing to answer");
    gate.on_response_created(Some("r"), false);
    gate.on_output_sent(false);
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_none(), "a response is active");
    gate.on_response_done(Some("r"), false);
    assert_eq!(gate.try_request(now, id).as_deref(), Some("voxgate_r"));
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_none(), "our request is still pending");
    gate.on_response_created(Some("r"), false);
    assert!(gate.try_request(now, id).is_none(), "a response is active");
    gate.on_response_done(Some("r"), false);
    assert!(gate.try_request(now, id).is_some(), "the output sent after our request needs its own turn");
    gate.on_response_created(Some("r"), false);
    gate.on_response_done(Some("r"), false);
    assert!(gate.try_request(now, id).is_none(), "covered");
}

#[test]
fn never_over_a_speaking_user_and_waits_for_vad_after_speech() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_speech_started();
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_none());
    gate.on_speech_stopped(now);
    assert!(gate.try_request(now, id).is_none(), "grace for server VAD");
    assert_eq!(gate.wake_at(), Some(now + AFTER_SPEECH_GRACE));
    assert!(gate.try_request(now + AFTER_SPEECH_GRACE, id).is_some());
}

#[test]
fn vad_response_covers_outputs() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_speech_started();
    gate.on_output_sent(false);
    gate.on_output_acknowledged();
    gate.on_speech_stopped(now);
    gate.on_response_created(Some("r"), false);
    gate.on_response_done(Some("r"), false);
    assert!(gate.try_request(now + AFTER_SPEECH_GRACE, id).is_none());
}

#[test]
fn refused_request_is_retried_after_the_active_response() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    let sent = gate.try_request(now, id).unwrap();
    // Server VAD started a response just before our request arrived: it may have missed the
    // output, so the refused request is retried after it.
    gate.on_response_created(Some("r"), false);
    assert!(gate.on_request_refused(&sent));
    gate.on_response_done(Some("r"), false);
    assert!(gate.try_request(now, id).is_some(), "retried after the racing response");

    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    let sent = gate.try_request(now, id).unwrap();
    assert!(gate.on_request_refused(&sent));
    assert!(gate.try_request(now, id).is_none(), "still active");
    gate.on_response_done(Some("r"), false);
    assert!(gate.try_request(now, id).is_some(), "retried");
    assert!(!gate.on_request_refused("someone_else"));
}

#[test]
fn wake_at_is_armed_only_when_time_alone_opens_the_gate() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    gate.on_speech_started();
    gate.on_speech_stopped(now);
    gate.on_response_created(Some("r"), false);
    assert_eq!(gate.wake_at(), None, "an active response holds the gate: no timer");
    gate.on_response_done(Some("r"), false);
    assert_eq!(gate.wake_at(), Some(now + AFTER_SPEECH_GRACE));
    gate.on_speech_started();
    assert_eq!(gate.wake_at(), None, "a speaking user holds the gate: no timer");
}

#[test]
fn any_error_or_silence_frees_a_pending_request() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    let sent = gate.try_request(now, id).unwrap();
    assert!(gate.on_request_failed(&sent));
    let again = gate.try_request(now, id).expect("asked again after an error");
    assert!(gate.on_request_failed(&again));
    assert!(gate.try_request(now, id).is_none(), "stops asking after repeated refusals");

    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    gate.try_request(now, id).unwrap();
    assert_eq!(gate.wake_at(), Some(now + REQUEST_ANSWER_TIMEOUT));
    gate.on_tick(now + REQUEST_ANSWER_TIMEOUT);
    assert_eq!(gate.wake_at(), None);
    assert!(gate.try_request(now + REQUEST_ANSWER_TIMEOUT, id).is_some(), "an unanswered request is retried");
}

#[test]
fn the_clients_own_request_in_flight_holds_the_gate() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_client_request(Some("client_1"), now);
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_none(), "the client's request would race ours");
    // Its response began before our output was in: the output needs a turn of its own.
    gate.on_response_created(Some("r_client"), false);
    gate.on_response_done(Some("r_client"), false);
    assert!(gate.try_request(now, id).is_some());

    // Refused by name, or with no name by the active-response code: over.
    let mut gate = ResponseGate::default();
    gate.on_client_request(Some("client_1"), now);
    gate.on_output_sent(false);
    gate.on_client_error(Some("someone_else"), Some("invalid_value"));
    assert!(gate.try_request(now, id).is_none());
    gate.on_client_error(Some("client_1"), Some("invalid_value"));
    assert!(gate.try_request(now, id).is_some());
    let mut gate = ResponseGate::default();
    gate.on_client_request(None, now);
    gate.on_output_sent(false);
    gate.on_client_error(None, Some("invalid_value"));
    assert!(gate.try_request(now, id).is_none(), "an error with no id may be about anything");
    gate.on_client_error(None, Some("conversation_already_has_active_response"));
    assert!(gate.try_request(now, id).is_some());

    // Never answered: given up, and time alone opens the gate then.
    let mut gate = ResponseGate::default();
    gate.on_client_request(Some("client_1"), now);
    gate.on_output_sent(false);
    assert_eq!(gate.wake_at(), Some(now + REQUEST_ANSWER_TIMEOUT));
    gate.on_tick(now + REQUEST_ANSWER_TIMEOUT);
    assert!(gate.try_request(now + REQUEST_ANSWER_TIMEOUT, id).is_some());
}

#[test]
fn responses_are_told_apart_by_id() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_response_created(Some("r_main"), false);
    gate.on_response_created(Some("r_oob"), true);
    gate.on_output_sent(false);
    gate.on_response_done(Some("r_oob"), false);
    assert!(gate.try_request(now, id).is_none(), "the default conversation's response still runs");
    assert_eq!(gate.wake_at(), None);
    gate.on_response_done(Some("r_main"), false);
    assert!(gate.try_request(now, id).is_some());

    // Started and never ended, again and again: bounded.
    let mut gate = ResponseGate::default();
    for i in 0..100 {
        gate.on_response_created(Some(&format!("r{i}")), true);
    }
    assert_eq!(gate.active.len(), MAX_ACTIVE);
}

#[test]
fn a_vad_response_covers_only_acknowledged_outputs() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_speech_started();
    gate.on_output_sent(false);
    gate.on_output_sent(false);
    gate.on_output_acknowledged();
    gate.on_speech_stopped(now);
    // The server started a response after acknowledging one output only.
    gate.on_response_created(Some("r"), false);
    gate.on_output_acknowledged();
    gate.on_response_done(Some("r"), false);
    assert!(gate.try_request(now + AFTER_SPEECH_GRACE, id).is_some(), "the late output gets its own turn");
}

/// A response that failed (a server error) with voxgate's outputs in it spoke none of them: they
/// are asked for again, twice in a row at most (a server failing every response is not asked
/// forever); a response that ends well starts the count again. One cut off by the user or a
/// limit owes nothing.
#[test]
fn the_outputs_of_a_failed_response_are_owed_again_twice_in_a_row_at_most() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    for round in 0..2 {
        assert!(gate.try_request(now, id).is_some(), "round {round}");
        gate.on_response_created(Some("r"), false);
        gate.on_response_done(Some("r"), true);
    }
    assert!(gate.try_request(now, id).is_some());
    gate.on_response_created(Some("r"), false);
    gate.on_response_done(Some("r"), true);
    assert_eq!(gate.try_request(now, id), None, "the third failure in a row is left to the user's next turn");

    // A response that ends well starts the count again.
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_some());
    gate.on_response_created(Some("r"), false);
    gate.on_response_done(Some("r"), false);
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_some());
    gate.on_response_created(Some("r"), false);
    gate.on_response_done(Some("r"), true);
    assert!(gate.try_request(now, id).is_some(), "owed again after a failure");

    // A response covering none of voxgate's outputs owes nothing when it fails.
    let mut gate = ResponseGate::default();
    gate.on_response_created(Some("r_user"), false);
    gate.on_response_done(Some("r_user"), true);
    assert_eq!(gate.try_request(now, id), None);
}

/// A model that answers every error with another failing call (an invented tool, arguments it
/// never gets right, a log that refuses calls) is asked to respond three times in a row for
/// nothing but errors, then not again until the user speaks: the errors wait in the conversation
/// for the user's next turn. A result among the outputs is always worth a response.
#[test]
fn requests_for_nothing_but_errors_stop_after_three_in_a_row_until_the_user_speaks() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    let round = |gate: &mut ResponseGate| {
        gate.on_response_created(Some("r"), false);
        gate.on_response_done(Some("r"), false);
    };
    for n in 0..MAX_ERROR_ROUNDS {
        gate.on_output_sent(true);
        assert!(gate.try_request(now, id).is_some(), "round {n}");
        round(&mut gate);
    }
    gate.on_output_sent(true);
    assert_eq!(gate.try_request(now, id), None, "a fourth round of errors waits for the user");
    assert_eq!(gate.wake_at(), None, "and no timer is armed for it (it would fire for nothing)");
    // A result among them is worth a response, and starts the count again.
    gate.on_output_sent(false);
    assert!(gate.try_request(now, id).is_some(), "a result is always asked for");
    round(&mut gate);
    for n in 0..MAX_ERROR_ROUNDS {
        gate.on_output_sent(true);
        assert!(gate.try_request(now, id).is_some(), "round {n} after the result");
        round(&mut gate);
    }
    gate.on_output_sent(true);
    assert_eq!(gate.try_request(now, id), None);
    // The user speaking starts it again too.
    gate.on_speech_started();
    gate.on_speech_stopped(now);
    assert!(gate.try_request(now + AFTER_SPEECH_GRACE, id).is_some(), "the user spoke: asked again");
    round(&mut gate);
    // And so does any other turn of the user's (a typed message, a push-to-talk commit, a decision
    // on a parked call): the session calls `on_user_turn` for each. A `response.create` of the
    // client's alone is not one: a client's code sends it after answering its own tool's call
    // (or for a side request) with nobody there, and it would let the loop go on for ever.
    let later = now + AFTER_SPEECH_GRACE;
    // (The request after the speech was the first of these rounds.)
    for n in 1..MAX_ERROR_ROUNDS {
        gate.on_output_sent(true);
        assert!(gate.try_request(later, id).is_some(), "round {n}");
        round(&mut gate);
    }
    gate.on_output_sent(true);
    assert_eq!(gate.try_request(later, id), None, "capped again");
    gate.on_client_request(Some("c_r"), later);
    gate.on_response_created(Some("r_c"), false);
    gate.on_response_done(Some("r_c"), false);
    gate.on_output_sent(true);
    assert_eq!(gate.try_request(later, id), None, "still capped after the client's own request");
    gate.on_user_turn();
    assert!(gate.try_request(later, id).is_some(), "the user's turn: asked again");
    round(&mut gate);
    // Input the client sends itself (typed, push-to-talk) is a turn too, and holds voxgate's own
    // request back for the grace: the client's `response.create` for it usually follows.
    for n in 1..MAX_ERROR_ROUNDS {
        gate.on_output_sent(true);
        assert!(gate.try_request(later, id).is_some(), "round {n}");
        round(&mut gate);
    }
    gate.on_output_sent(true);
    assert_eq!(gate.try_request(later, id), None, "capped");
    gate.on_user_input(later);
    assert_eq!(gate.try_request(later, id), None, "held for the client's own request");
    assert_eq!(gate.wake_at(), Some(later + AFTER_SPEECH_GRACE));
    assert!(gate.try_request(later + AFTER_SPEECH_GRACE, id).is_some(), "asked once none came");
}

/// A result owed again after a request that did not deliver it (unanswered, refused, a failed
/// response) is asked for whatever errors came with it, and such retries are not error rounds:
/// the cap never holds a result back.
#[test]
fn outputs_owed_again_are_not_counted_as_error_rounds() {
    let now = Instant::now();
    let mut gate = ResponseGate::default();
    gate.on_output_sent(false);
    let mut pending = gate.try_request(now, id).unwrap();
    // An error arrives while the request for the result is pending. Then: the request goes
    // unanswered, the response to the next fails, and the same again; the result is asked for
    // every time (it was left to the user's next turn after the third of these).
    gate.on_output_sent(true);
    for n in 0..2 {
        gate.on_request_failed(&pending);
        assert!(gate.try_request(now, id).is_some(), "round {n}: after the unanswered request");
        gate.on_response_created(Some("r"), false);
        gate.on_response_done(Some("r"), true);
        pending = gate.try_request(now, id).unwrap_or_else(|| panic!("round {n}: after the failed response"));
    }
    assert_eq!(gate.error_rounds, 0, "retries of what was owed are not error rounds");
}
