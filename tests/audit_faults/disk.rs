//! A full audit disk: `fail_closed` withholds and recovers, `fail_open` releases and counts.

use std::time::Duration;

use crate::helpers::*;
use crate::support::read_jsonl;

#[tokio::test]
async fn full_disk_fail_closed_withholds_results_goes_unready_and_recovers_by_itself() {
    let Some(OnSmallDisk { work: _work, disk, mut fake, audit, mut child, addr }) = on_small_disk("").await else {
        return;
    };
    let (mut client, mut up) = session(&addr, &mut fake).await;

    let (output, event) = bmi_call(&mut client, &mut up, "before").await;
    assert_eq!(event["type"], "voxgate.tool_call.completed", "{output}");
    assert_eq!(readyz(&addr).await, 200);

    let filler = disk.fill();
    let (refused, output, event) = call_until_refused(&mut client, &mut up, "full").await;
    // Nothing the call produced reaches the model or the client: only the error.
    assert_eq!(output["error"]["code"], "audit_unavailable", "{output}");
    assert_eq!(output.as_object().unwrap().len(), 1, "{output}");
    assert_eq!(event["type"], "voxgate.tool_call.failed");
    assert_eq!(event["error"]["code"], "audit_unavailable");
    assert_eq!(
        readyz(&addr).await,
        503,
        "not ready while the audit cannot be written"
    );

    std::fs::remove_file(filler).unwrap();
    let mut ready = false;
    for _ in 0..100 {
        if readyz(&addr).await == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "readiness comes back on its own once space returns");
    let (output, event) = bmi_call(&mut client, &mut up, "after").await;
    assert_eq!(event["type"], "voxgate.tool_call.completed", "{output}");

    drop(client);
    stop(&mut child).await;
    let records = read_jsonl(&audit);
    let refused_finish = finish(&records, &refused);
    assert_eq!(
        refused_finish.len(),
        1,
        "the held record was written once space returned: {records:?}"
    );
    assert_eq!(refused_finish[0]["status"], "failed");
    assert_eq!(refused_finish[0]["error_code"], "audit_unavailable");
    assert!(records.iter().all(|r| r["instance"] == "itest-1"));
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "{report}");
}

#[tokio::test]
async fn full_disk_fail_open_releases_results_and_counts_the_failure() {
    let Some(OnSmallDisk { work: _work, disk, mut fake, audit, mut child, addr }) =
        on_small_disk("on_error = \"fail_open\"").await
    else {
        return;
    };
    let (mut client, mut up) = session(&addr, &mut fake).await;
    bmi_call(&mut client, &mut up, "before").await;

    let filler = disk.fill();
    let mut counted = false;
    for n in 0..20 {
        let (output, event) = bmi_call(&mut client, &mut up, &format!("open{n}")).await;
        assert_eq!(
            event["type"], "voxgate.tool_call.completed",
            "fail_open releases the result: {output}"
        );
        assert!(output.get("error").is_none(), "{output}");
        let body = metrics(&addr).await;
        if body
            .lines()
            .any(|l| l.starts_with("voxgate_audit_errors_total") && !l.ends_with(" 0"))
        {
            counted = true;
            break;
        }
    }
    assert!(counted, "the failure is counted");
    assert_eq!(readyz(&addr).await, 200, "fail_open stays ready");

    std::fs::remove_file(filler).unwrap();
    drop(client);
    stop(&mut child).await;
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "held records are written once space returns: {report}");
    assert!(
        finish(&read_jsonl(&audit), "open0")
            .iter()
            .all(|r| r["status"] == "completed")
    );
}

/// With `fail_closed` and the audit disk refusing writes, a new call is finished at accept with
/// `audit_unavailable`: the tool never runs (no `voxgate.tool_call.started`), and the model and the
/// client hear the error like any refused call.
#[tokio::test]
async fn full_disk_fail_closed_refuses_new_calls_without_running_them() {
    let Some(OnSmallDisk { work: _work, disk, mut fake, audit, mut child, addr }) = on_small_disk("").await else {
        return;
    };
    let (mut client, mut up) = session(&addr, &mut fake).await;
    let filler = disk.fill();
    call_until_refused(&mut client, &mut up, "full").await;
    assert_eq!(readyz(&addr).await, 503);

    crate::support::model_calls(&mut up, &[("refused", "calculate_medical_score", BMI)]).await;
    let item = up.until("conversation.item.create").await;
    let output: serde_json::Value =
        serde_json::from_str(item["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(output["error"]["code"], "audit_unavailable", "{output}");
    let events = client
        .collect_until_any(&["voxgate.tool_call.completed", "voxgate.tool_call.failed"])
        .await;
    assert!(
        events.iter().all(|e| e["type"] != "voxgate.tool_call.started"),
        "the tool must not run: {events:?}"
    );
    assert_eq!(events.last().unwrap()["error"]["code"], "audit_unavailable");

    std::fs::remove_file(filler).unwrap();
    drop(client);
    stop(&mut child).await;
    let records = read_jsonl(&audit);
    let refused = finish(&records, "refused");
    assert_eq!(refused.len(), 1, "{records:?}");
    assert_eq!(refused[0]["error_code"], "audit_unavailable");
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "{report}");
}
