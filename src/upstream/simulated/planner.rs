//! Deciding what a response says or calls, from the conversation since the model's last turn:
//! tool outputs waiting for an answer (and not followed by a newer user message) are summarised; otherwise the latest typed user text is read by
//! the [`intents`](super::intents) rules and becomes function calls (when the session offers the
//! tool) or a short spoken reply that admits it is the simulated model.

use chrono::NaiveDate;
use serde_json::Value;

use super::conversation::Conversation;
use super::events::new_call_id;
use super::intents::{self, Understood, clip, fit::fit};
use super::response::Output;
use super::summary::summarise;

/// Longest stretch of the user's words echoed back.
const MAX_ECHO: usize = 80;

/// The tools a response may call and how it may call them.
pub struct ToolOffer<'a> {
    /// Tool definitions (`{type: "function", name, parameters}`).
    pub tools: &'a [Value],
    /// `"auto"`, `"none"`, `"required"` or `{"type": "function", "name": …}`.
    pub choice: &'a Value,
}

impl ToolOffer<'_> {
    /// The definition of `name` when it may be called.
    fn find(&self, name: &str) -> Option<&Value> {
        if self.choice == "none" {
            return None;
        }
        if let Some(only) = self.choice.get("name").and_then(Value::as_str)
            && only != name
        {
            return None;
        }
        self.tools.iter().find(|tool| tool["type"] == "function" && tool["name"] == name)
    }
}

/// The outputs of the next response.
pub fn plan(conversation: &Conversation, offer: &ToolOffer<'_>, today: NaiveDate) -> Vec<Output> {
    let pending = conversation.since_last_model_turn();
    // Outputs the user has since spoken over (a barge-in cancelled their answer, then a new
    // question came) are not answered: like a real model, the newest question is.
    let unanswered = pending
        .iter()
        .rposition(|item| item["type"] == "message" && item["role"] == "user")
        .map_or(pending, |last_user| &pending[last_user..]);
    let answers: Vec<String> = unanswered
        .iter()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| {
            let call = item["call_id"].as_str().and_then(|id| conversation.find_call(id));
            summarise(call, item["output"].as_str().unwrap_or_default())
        })
        .collect();
    if !answers.is_empty() {
        return vec![Output::Speech(answers.join(" "))];
    }
    let last_user = pending.iter().rev().find(|item| item["type"] == "message" && item["role"] == "user");
    let Some(user) = last_user else {
        return vec![Output::Speech("This is voxgate's simulated model. What can I do for you?".into())];
    };
    match typed_text(user) {
        Some(text) => answer_text(&text, offer, today, conversation),
        None => vec![Output::Speech(
            "This is voxgate's simulated model. I received your audio, but I cannot understand speech. \
             Please type your request."
                .into(),
        )],
    }
}

fn answer_text(text: &str, offer: &ToolOffer<'_>, today: NaiveDate, conversation: &Conversation) -> Vec<Output> {
    let mut understood = intents::understand(text, today);
    if understood.is_empty() {
        // "Read it" refers to the files the last search found.
        let last_search = conversation.latest_output_of("search_nextcloud_files");
        understood.extend(intents::files::understand_read(text, last_search.as_ref()));
    }
    if understood.is_empty() {
        let echo = clip(text.trim(), MAX_ECHO);
        return vec![Output::Speech(format!("This is voxgate's simulated model. You said: {echo}"))];
    }
    let mut said = Vec::new();
    let mut calls = Vec::new();
    for request in understood {
        match (request, offer) {
            (Understood::NeedMore { ask, .. }, _) => said.push(ask),
            (Understood::Call { tool, arguments }, offer) => match offer.find(tool) {
                Some(definition) => {
                    let arguments = fit(arguments, &definition["parameters"]);
                    calls.push(Output::Call {
                        name: tool.to_string(),
                        call_id: new_call_id(),
                        arguments: arguments.to_string(),
                    });
                }
                None => said
                    .push(format!("I would use the {tool} tool for that, but this session does not offer it to me.")),
            },
        }
    }
    let mut outputs: Vec<Output> = Vec::new();
    if !said.is_empty() {
        outputs.push(Output::Speech(said.join(" ")));
    }
    outputs.extend(calls);
    outputs
}

/// The text of a user message typed as `input_text` (`None` for audio-only messages).
fn typed_text(item: &Value) -> Option<String> {
    let parts = item["content"].as_array()?;
    let texts: Vec<&str> =
        parts.iter().filter(|part| part["type"] == "input_text").filter_map(|part| part["text"].as_str()).collect();
    (!texts.is_empty()).then(|| texts.join(" "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 3, 10).expect("date")
    }

    fn conversation(items: &[Value]) -> Conversation {
        let mut conversation = Conversation::default();
        for item in items {
            conversation.place(None, item.clone()).expect("placed");
        }
        conversation
    }

    fn user_text(id: &str, text: &str) -> Value {
        json!({"id": id, "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    fn tools() -> Vec<Value> {
        vec![json!({"type": "function", "name": "get_calendar_events", "parameters": {"type": "object",
            "properties": {"start_date": {"type": "string"}, "end_date": {"type": "string"}}}})]
    }

    #[test]
    fn a_recognised_request_with_its_tool_becomes_a_call() {
        let tools = tools();
        let offer = ToolOffer { tools: &tools, choice: &json!("auto") };
        let outputs = plan(&conversation(&[user_text("u1", "What is on my calendar tomorrow?")]), &offer, today());
        let [Output::Call { name, call_id, arguments }] = outputs.as_slice() else { panic!("{outputs:?}") };
        assert_eq!(name, "get_calendar_events");
        assert!(call_id.starts_with("call_"));
        let arguments: Value = serde_json::from_str(arguments).expect("json");
        assert_eq!(arguments, json!({"start_date": "2026-03-11", "end_date": "2026-03-11"}));
    }

    #[test]
    fn without_the_tool_or_with_tool_choice_none_it_speaks() {
        let tools = tools();
        let none = json!("none");
        for offer in [ToolOffer { tools: &[], choice: &json!("auto") }, ToolOffer { tools: &tools, choice: &none }] {
            let outputs = plan(&conversation(&[user_text("u1", "my calendar today")]), &offer, today());
            let [Output::Speech(text)] = outputs.as_slice() else { panic!("{outputs:?}") };
            assert!(text.contains("does not offer"), "{text}");
        }
    }

    #[test]
    fn unrecognised_text_is_echoed_honestly() {
        let offer = ToolOffer { tools: &[], choice: &json!("auto") };
        let outputs = plan(&conversation(&[user_text("u1", "Hello, can you hear me?")]), &offer, today());
        assert_eq!(
            outputs,
            [Output::Speech("This is voxgate's simulated model. You said: Hello, can you hear me?".into())]
        );
    }

    #[test]
    fn tool_outputs_are_summarised_once() {
        let offer = ToolOffer { tools: &[], choice: &json!("auto") };
        let mut items = vec![
            user_text("u1", "bmi 70 kg 175 cm"),
            json!({"id": "f1", "type": "function_call", "name": "calculate_medical_score", "call_id": "call_1", "arguments": "{}"}),
            json!({"id": "o1", "type": "function_call_output", "call_id": "call_1",
                   "output": "{\"calculator_name\":\"bmi\",\"score\":22.9,\"risk_category\":\"normal\"}"}),
        ];
        let outputs = plan(&conversation(&items), &offer, today());
        assert_eq!(outputs, [Output::Speech("The BMI is 22.9 (normal weight).".into())]);
        items.push(json!({"id": "a1", "type": "message", "role": "assistant", "content": []}));
        let outputs = plan(&conversation(&items), &offer, today());
        assert_eq!(outputs, [Output::Speech("This is voxgate's simulated model. What can I do for you?".into())]);
    }

    #[test]
    fn audio_only_turns_get_an_honest_answer() {
        let offer = ToolOffer { tools: &[], choice: &json!("auto") };
        let audio = json!({"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": null}]});
        let outputs = plan(&conversation(&[audio]), &offer, today());
        let [Output::Speech(text)] = outputs.as_slice() else { panic!("{outputs:?}") };
        assert!(text.contains("cannot understand speech"), "{text}");
    }
}
