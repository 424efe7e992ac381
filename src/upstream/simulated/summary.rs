//! What the simulated model says after a tool ran: one sentence built from the `function_call_output`
//! (and the `function_call` it answers), e.g. "The BMI is 22.9 (normal weight)." or "The event was
//! not created: you declined." Outputs follow TOOLS.md result shapes and CONTRACT §4 error objects;
//! anything else gets a generic sentence. The text is spoken to the user, never logged.

use serde_json::Value;

use crate::upstream::simulated::intents::clip;

/// Longest error message or free text read out.
const MAX_SPOKEN: usize = 200;
/// Calendar events or articles named before "and N more".
const MAX_LISTED: usize = 3;

/// One sentence about `output` (the item's string), answering `call` (its `function_call` item, if
/// it is still in the conversation).
pub fn summarise(call: Option<&Value>, output: &str) -> String {
    let tool = call.and_then(|c| c["name"].as_str()).unwrap_or_default();
    let Ok(result) = serde_json::from_str::<Value>(output) else {
        return format!("The {} answered: {}", label(tool), clip(output.trim(), MAX_SPOKEN));
    };
    if let Some(error) = result.get("error").filter(|e| !e.is_null()) {
        return failure(tool, error);
    }
    match tool {
        "calculate_medical_score" => score(&result),
        "get_calendar_events" => events(&result),
        "create_calendar_event" => created(&result),
        "search_pubmed" => articles(&result),
        "search_nextcloud_files" => super::intents::files::spoken_search(&result),
        "retrieve_nextcloud_file" => super::intents::files::spoken_file(&result),
        "generate_differential_diagnosis" => differential(&result),
        _ => generic(tool, &result),
    }
}

fn label(tool: &str) -> String {
    match tool {
        "calculate_medical_score" => "calculator".into(),
        "get_calendar_events" => "calendar".into(),
        "create_calendar_event" => "calendar".into(),
        "search_pubmed" => "PubMed search".into(),
        "" => "tool".into(),
        other => format!("{} tool", other.replace('_', " ")),
    }
}

fn failure(tool: &str, error: &Value) -> String {
    let code = error["code"].as_str().unwrap_or_default();
    let message = error["message"].as_str().or(error.as_str()).unwrap_or(code);
    let why = match code {
        "user_declined" => "you declined".to_string(),
        "confirmation_expired" => "the confirmation expired".to_string(),
        "client_cannot_confirm" => "this client cannot confirm actions".to_string(),
        _ => clip(message, MAX_SPOKEN),
    };
    match (tool, code) {
        ("create_calendar_event", _) => format!("The event was not created: {why}."),
        (_, "user_declined" | "confirmation_expired" | "client_cannot_confirm") => {
            format!("I did not use the {}: {why}.", label(tool))
        }
        _ => format!("The {} failed: {why}", label(tool)).trim_end_matches('.').to_string() + ".",
    }
}

fn score(result: &Value) -> String {
    let calculator = result["calculator_name"].as_str().unwrap_or_default();
    let value = number_text(&result["score"]);
    let category = result["risk_category"].as_str().unwrap_or_default();
    match calculator {
        "bmi" => {
            let band = if category == "normal" { "normal weight".to_string() } else { category.replace('_', " ") };
            format!("The BMI is {value} ({band}).")
        }
        _ => {
            let title = match calculator {
                "wells_dvt" => "Wells DVT",
                "wells_pe" => "Wells PE",
                "chadsvasc" => "CHA2DS2-VASc",
                "hasbled" => "HAS-BLED",
                "grace" => "GRACE",
                "meld" => "MELD",
                "renal_dosing" => "creatinine clearance",
                _ => "calculated",
            };
            if category.is_empty() {
                format!("The {title} score is {value}.")
            } else {
                format!("The {title} score is {value}: {} risk.", category.replace('_', " "))
            }
        }
    }
}

fn events(result: &Value) -> String {
    let list = result["events"].as_array().map(Vec::as_slice).unwrap_or_default();
    let total = result["total_count"].as_u64().map_or(list.len(), |n| usize::try_from(n).unwrap_or(list.len()));
    if total == 0 || list.is_empty() {
        return "You have no events in that period.".into();
    }
    let named: Vec<String> = list
        .iter()
        .take(MAX_LISTED)
        .map(|event| {
            let title = clip(event["title"].as_str().unwrap_or("an untitled event"), 60);
            match event["start"].as_str().and_then(when) {
                Some((day, time)) => format!("{title} on {day} at {time}"),
                None => title,
            }
        })
        .collect();
    let more = total.saturating_sub(named.len());
    let noun = if total == 1 { "event" } else { "events" };
    let tail = if more > 0 { format!(", and {more} more") } else { String::new() };
    format!("You have {total} {noun}: {}{tail}.", named.join("; "))
}

fn created(result: &Value) -> String {
    let title = clip(result["title"].as_str().unwrap_or("the event"), 80);
    let at = result["start"].as_str().and_then(when).map(|(day, time)| format!(" on {day} at {time}"));
    if result["created"] == Value::Bool(false) {
        return format!("The event \"{title}\" already exists, so nothing new was created.");
    }
    format!("I created the event \"{title}\"{}.", at.unwrap_or_default())
}

fn articles(result: &Value) -> String {
    let list = result["articles"].as_array().map(Vec::as_slice).unwrap_or_default();
    let total = result["total_count"].as_u64().unwrap_or(list.len() as u64);
    match list.first().and_then(|article| article["title"].as_str()) {
        None if total == 0 => "I found no matching articles.".into(),
        None => format!("I found {total} matching articles."),
        Some(title) => format!("I found {total} matching articles. The first is: {}", clip(title, 120)),
    }
}

fn differential(result: &Value) -> String {
    let list = result["diagnoses"].as_array().map(Vec::as_slice).unwrap_or_default();
    let Some(lead) = list.first().and_then(|d| d["diagnosis"].as_str()) else {
        return "I could not match those findings to any condition I know.".into();
    };
    let urgent: Vec<&str> =
        list.iter().skip(1).filter(|d| d["must_not_miss"] == true).filter_map(|d| d["diagnosis"].as_str()).collect();
    let mut text = format!("The leading diagnosis is {lead}.");
    if !urgent.is_empty() {
        text.push_str(&format!(" Do not miss: {}.", urgent.join(", ")));
    }
    clip(&text, MAX_SPOKEN)
}

fn generic(tool: &str, result: &Value) -> String {
    if let Some(message) = result["message"].as_str() {
        return format!("The {} says: {}", label(tool), clip(message, MAX_SPOKEN));
    }
    match result["total_count"].as_u64().or(result["count"].as_u64()) {
        Some(count) => format!("The {} returned {count} results.", label(tool)),
        None => format!("The {} finished.", label(tool)),
    }
}

/// "2026-03-11T14:00:00…" → ("2026-03-11", "14:00"); a date alone has no time and gives `None`.
fn when(stamp: &str) -> Option<(&str, &str)> {
    let day = stamp.get(..10)?;
    let time = stamp.get(11..16)?;
    (stamp.get(10..11) == Some("T")).then_some((day, time))
}

fn number_text(value: &Value) -> String {
    match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str) -> Value {
        json!({"type": "function_call", "name": name, "call_id": "call_1", "arguments": "{}"})
    }

    #[test]
    fn bmi_and_scores() {
        let output = json!({"calculator_name": "bmi", "score": 22.9, "risk_category": "normal", "interpretation": "…"});
        assert_eq!(
            summarise(Some(&call("calculate_medical_score")), &output.to_string()),
            "The BMI is 22.9 (normal weight)."
        );
        let output = json!({"calculator_name": "wells_dvt", "score": 5, "risk_category": "high"});
        assert_eq!(
            summarise(Some(&call("calculate_medical_score")), &output.to_string()),
            "The Wells DVT score is 5: high risk."
        );
    }

    #[test]
    fn calendar_results() {
        let output = json!({"events": [
            {"title": "Ward round", "start": "2026-03-11T09:00:00"},
            {"title": "Clinic", "start": "2026-03-11T14:00:00"},
        ], "total_count": 2});
        assert_eq!(
            summarise(Some(&call("get_calendar_events")), &output.to_string()),
            "You have 2 events: Ward round on 2026-03-11 at 09:00; Clinic on 2026-03-11 at 14:00."
        );
        let none = json!({"events": [], "total_count": 0});
        assert_eq!(
            summarise(Some(&call("get_calendar_events")), &none.to_string()),
            "You have no events in that period."
        );
        let made = json!({"event_id": "e1", "title": "Meeting with Dr. Smith", "start": "2026-03-11T14:00:00", "created": true});
        assert_eq!(
            summarise(Some(&call("create_calendar_event")), &made.to_string()),
            "I created the event \"Meeting with Dr. Smith\" on 2026-03-11 at 14:00."
        );
    }

    #[test]
    fn errors_are_read_out() {
        let declined = json!({"error": {"code": "user_declined", "message": "The user declined."}});
        assert_eq!(
            summarise(Some(&call("create_calendar_event")), &declined.to_string()),
            "The event was not created: you declined."
        );
        let failed =
            json!({"error": {"code": "invalid_arguments", "message": "`/parameters/weight_kg`: must be a number"}});
        assert_eq!(
            summarise(Some(&call("calculate_medical_score")), &failed.to_string()),
            "The calculator failed: `/parameters/weight_kg`: must be a number."
        );
    }

    #[test]
    fn pubmed_generic_and_unparseable() {
        let found = json!({"articles": [{"title": "Lactate clearance in sepsis", "pmid": "1"}], "total_count": 63});
        assert_eq!(
            summarise(Some(&call("search_pubmed")), &found.to_string()),
            "I found 63 matching articles. The first is: Lactate clearance in sepsis"
        );
        assert_eq!(summarise(Some(&call("get_weather")), "{\"count\": 3}"), "The get weather tool returned 3 results.");
        let ddx = json!({"diagnoses": [{"diagnosis": "Acute coronary syndrome", "must_not_miss": true},
            {"diagnosis": "Stable angina", "must_not_miss": false}, {"diagnosis": "Pulmonary embolism", "must_not_miss": true}]});
        assert_eq!(
            summarise(Some(&call("generate_differential_diagnosis")), &ddx.to_string()),
            "The leading diagnosis is Acute coronary syndrome. Do not miss: Pulmonary embolism."
        );
        assert_eq!(summarise(None, "sunny"), "The tool answered: sunny");
    }
}
