//! The CalDAV calendar backend against a real Radicale (tests/support/radicale.rs): discovery from
//! the server root, a principal, a collection and a Nextcloud-style `/remote.php/dav` prefix; a
//! listing with a weekly series expanded across a daylight-saving change; create, and a replay that
//! creates nothing; a calendar picked by display name; the event read back with the Python `caldav`
//! client; wrong credentials and an unreachable server; and one booking end to end through the
//! proxy (model call, confirmation, result) with `/readyz`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use support::radicale::{PASSWORD, Radicale, USER};
use support::{FakeUpstream, TestProxy, model_calls};
use voxgate::config::{CalendarBackendConfig, CalendarKind, Secret, ToolsConfig};
use voxgate::policy::Principal;
use voxgate::tools::registry::ToolRegistry;
use voxgate::tools::{CallContext, ToolError};

/// Every call here is bounded: a hung server fails the test, never blocks CI.
const CALL_LIMIT: Duration = Duration::from_secs(30);

fn config(url: &str, password: &str, calendar: Option<&str>) -> CalendarBackendConfig {
    CalendarBackendConfig {
        kind: CalendarKind::Caldav,
        url: Some(url.into()),
        username: Some(USER.into()),
        password: Some(Secret::new(password)),
        calendar: calendar.map(str::to_string),
        timezone: "Europe/Berlin".into(),
        ..Default::default()
    }
}

struct Tools(ToolRegistry);

impl Tools {
    fn new(config: &CalendarBackendConfig) -> Tools {
        let tools = voxgate::tools::calendar::tools(config).unwrap();
        Tools(ToolRegistry::from_tools(tools, &ToolsConfig::default()).unwrap())
    }

    /// Validate as a session does, then call, within [`CALL_LIMIT`].
    async fn call(&self, name: &str, args: Value, session: &str, call: &str) -> Result<Value, ToolError> {
        let tool = self.0.get(name).unwrap();
        tool.validate(&args)?;
        let ctx = CallContext {
            session_id: session.into(),
            call_id: call.into(),
            principal: Principal::new("tester", Vec::new()),
        };
        let result = tokio::time::timeout(CALL_LIMIT, tool.tool.call(args, ctx)).await.expect("the call timed out");
        result.map(|out| out.result)
    }

    async fn list(&self, args: Value) -> Value {
        self.call("get_calendar_events", args, "s", "list").await.unwrap()
    }
}

fn starts(result: &Value) -> Vec<(String, String)> {
    result["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["title"].as_str().unwrap().to_string(), e["start"].as_str().unwrap().to_string()))
        .collect()
}

fn booking(title: &str, calendar: Option<&str>) -> Value {
    let mut args =
        json!({"title": title, "start_datetime": "2024-04-02T14:00", "duration_minutes": 30, "location": "Room 4"});
    if let Some(calendar) = calendar {
        args["calendar_name"] = json!(calendar);
    }
    args
}

#[tokio::test]
async fn root_discovery_lists_the_weekly_series_and_creates_once() {
    let server = Arc::new(tokio::task::spawn_blocking(|| Radicale::start("")).await.unwrap());
    // The configured default calendar, by display name.
    let tools = Tools::new(&config(&server.root(), PASSWORD, Some("Clinic Rota")));

    let week = tools.list(json!({"start_date": "2024-03-25", "end_date": "2024-04-08"})).await;
    let expected = [
        ("Team meeting", "2024-03-25T09:00:00+01:00"),
        ("Team meeting", "2024-04-01T09:00:00+02:00"),
        ("Team meeting", "2024-04-08T09:00:00+02:00"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(starts(&week), expected, "{week}");
    assert_eq!(week["events"][1]["end"], "2024-04-01T10:00:00+02:00");
    assert_eq!(week["events"][0]["calendar_name"], "Clinic Rota");

    // The seed's default "Default" is the default calendar.
    let created = tools
        .call("create_calendar_event", booking("Follow-up Zebulon Quixote", None), "sess-1", "call-1")
        .await
        .unwrap();
    assert_eq!(created["created"], true, "{created}");
    assert_eq!(created["calendar_name"], "Clinic Rota");
    assert_eq!(created["start"], "2024-04-02T14:00:00+02:00");
    let uid = created["event_id"].as_str().unwrap().to_string();
    assert_eq!(server.stored("clinic").len(), 2);

    // The same call again (a retry, a replay after a crash) finds its event and writes nothing.
    let again = tools
        .call("create_calendar_event", booking("Follow-up Zebulon Quixote", None), "sess-1", "call-1")
        .await
        .unwrap();
    assert_eq!(again["created"], false, "{again}");
    assert_eq!(again["event_id"], uid.as_str());
    assert_eq!(server.stored("clinic").len(), 2);

    // Another client sees exactly one such event.
    let reader = Arc::clone(&server);
    let seen = tokio::task::spawn_blocking(move || reader.read_back("Clinic Rota")).await.unwrap();
    let ours: Vec<&Value> = seen.iter().filter(|e| e["uid"] == uid.as_str()).collect();
    assert_eq!(ours.len(), 1, "{seen:?}");
    assert_eq!(ours[0]["summary"], "Follow-up Zebulon Quixote");
    assert_eq!(ours[0]["dtstart"], "2024-04-02T12:00:00+00:00");

    // And voxgate lists it with the series.
    let day = tools.list(json!({"start_date": "2024-04-01", "end_date": "2024-04-02"})).await;
    let titles: Vec<String> = starts(&day).into_iter().map(|(t, _)| t).collect();
    assert_eq!(titles, ["Team meeting", "Follow-up Zebulon Quixote"]);
}

#[tokio::test]
async fn a_calendar_is_picked_by_display_name_and_unknown_names_are_refused() {
    let server = tokio::task::spawn_blocking(|| Radicale::start("")).await.unwrap();
    let tools = Tools::new(&config(&server.root(), PASSWORD, None));
    let created = tools.call("create_calendar_event", booking("Dentist", Some("home")), "s", "c-home").await.unwrap();
    assert_eq!(created["calendar_name"], "Home");
    assert_eq!(server.stored("home").len(), 1);
    assert_eq!(server.stored("clinic").len(), 1, "only the seeded series");

    let home = tools.list(json!({"start_date": "2024-04-01", "end_date": "2024-04-07", "calendar_name": "Home"})).await;
    assert_eq!(starts(&home), [("Dentist".to_string(), "2024-04-02T14:00:00+02:00".to_string())]);
    // Without a name every event calendar is listed; the tasks-only one is not a calendar of events.
    let all = tools.list(json!({"start_date": "2024-04-01", "end_date": "2024-04-07"})).await;
    assert_eq!(all["count"], 2, "{all}");

    let err = tools.call("create_calendar_event", booking("Nowhere", Some("Tasks")), "s", "c-x").await.unwrap_err();
    assert_eq!(err.code().as_str(), "invalid_arguments");
    assert!(err.public_message().contains("calendar_name"), "{}", err.public_message());

    // find_event, the crash-recovery probe, sees the event by its UID.
    let backend = voxgate::tools::calendar::CaldavCalendar::new(
        &config(&server.root(), PASSWORD, None),
        "Europe/Berlin".parse().unwrap(),
    )
    .unwrap();
    use voxgate::tools::calendar::CalendarBackend;
    let found = backend.find_event(created["event_id"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!((found.title.as_str(), found.calendar.as_str()), ("Dentist", "Home"));
    assert!(backend.find_event("no-such-uid@voxgate").await.unwrap().is_none());
}

#[tokio::test]
async fn principal_collection_and_nextcloud_urls_all_work() {
    let plain = tokio::task::spawn_blocking(|| Radicale::start("")).await.unwrap();
    for url in [format!("{}{USER}/", plain.root()), format!("{}{USER}/home/", plain.root())] {
        let tools = Tools::new(&config(&url, PASSWORD, None));
        let created = tools.call("create_calendar_event", booking("Form", None), "s", &url).await.unwrap();
        let expected = if url.ends_with("home/") { "Home" } else { "Clinic Rota" };
        assert_eq!(created["calendar_name"], expected, "{url}");
    }

    let nextcloud = tokio::task::spawn_blocking(|| Radicale::start("/remote.php/dav")).await.unwrap();
    // The form Nextcloud documents, and the bare host (through /.well-known/caldav).
    for url in [nextcloud.dav(), nextcloud.root()] {
        let tools = Tools::new(&config(&url, PASSWORD, Some("Clinic Rota")));
        let week = tools.list(json!({"start_date": "2024-04-01", "end_date": "2024-04-07"})).await;
        assert_eq!(starts(&week)[0], ("Team meeting".to_string(), "2024-04-01T09:00:00+02:00".to_string()), "{url}");
        let created = tools.call("create_calendar_event", booking("Ward round", None), "nc", &url).await.unwrap();
        assert_eq!(created["created"], true);
    }
    assert_eq!(nextcloud.stored("clinic").len(), 3);
    let seen = tokio::task::spawn_blocking(move || nextcloud.read_back("Clinic Rota")).await.unwrap();
    assert_eq!(seen.iter().filter(|e| e["summary"] == "Ward round").count(), 2);
}

#[tokio::test]
async fn wrong_password_and_a_dead_server_are_clear_backend_errors() {
    let server = tokio::task::spawn_blocking(|| Radicale::start("")).await.unwrap();
    let tools = Tools::new(&config(&server.root(), "not the password", None));
    for (name, args) in [
        ("get_calendar_events", json!({"start_date": "2024-04-01"})),
        ("create_calendar_event", booking("Secret title", None)),
    ] {
        let err = tools.call(name, args, "s", name).await.unwrap_err();
        assert_eq!(err.code().as_str(), "backend_error");
        let message = err.public_message();
        assert!(message.contains("refused the credentials"), "{message}");
        for leak in ["not the password", "127.0.0.1", &server.port.to_string(), "Secret title"] {
            assert!(!message.contains(leak), "{message} leaks {leak}");
        }
    }
    assert!(server.stored("clinic").len() == 1 && server.stored("home").is_empty());

    // Nothing listens: three attempts with back-off, then a plain "unavailable".
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tools = Tools::new(&config(&format!("http://127.0.0.1:{port}/"), PASSWORD, None));
    let err = tools.call("get_calendar_events", json!({"start_date": "2024-04-01"}), "s", "dead").await.unwrap_err();
    assert_eq!(err.code().as_str(), "backend_error");
    assert!(!err.public_message().contains(&port.to_string()));
}

#[tokio::test]
async fn a_booking_through_the_proxy_lands_in_radicale_and_readyz_reports_a_dead_server() {
    let server = Arc::new(tokio::task::spawn_blocking(|| Radicale::start("")).await.unwrap());
    let mut fake = FakeUpstream::start().await;
    let toml = format!(
        "[backends.calendar]\nkind = \"caldav\"\nurl = \"{}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\ncalendar = \"clinic\"\ntimezone = \"Europe/Berlin\"\n",
        server.root()
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    let args = booking("Follow-up Zebulon Quixote", None).to_string();
    model_calls(&mut up, &[("call_book", "create_calendar_event", &args)]).await;
    client.until("voxgate.tool_call.confirmation_requested").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_book", "approved": true})).await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "create_calendar_event");
    let output = up.until("conversation.item.create").await;
    let result: Value = serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!((result["created"].as_bool(), result["calendar_name"].as_str()), (Some(true), Some("Clinic Rota")));
    let reader = Arc::clone(&server);
    let seen = tokio::task::spawn_blocking(move || reader.read_back("Clinic Rota")).await.unwrap();
    assert!(seen.iter().any(|e| e["summary"] == "Follow-up Zebulon Quixote"), "{seen:?}");
    // The event's title taints the session: a PubMed query naming the patient is blocked.
    let query = json!({"query": "Zebulon heart failure"}).to_string();
    model_calls(&mut up, &[("call_pubmed", "search_pubmed", &query)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "phi_blocked", "{failed}");
    let (status, body) = proxy.http_get("/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    proxy.stop().await;

    // A server that is down at start: the proxy starts, /readyz says which tools are degraded.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let toml =
        format!("[backends.calendar]\nkind = \"caldav\"\nurl = \"http://127.0.0.1:{port}/\"\ntimezone = \"UTC\"\n");
    let proxy = TestProxy::start(&toml).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = proxy.http_get("/readyz").await;
        assert_eq!(status, 200);
        if body.contains("degraded") {
            assert!(body.contains("get_calendar_events") && body.contains("create_calendar_event"), "{body}");
            assert!(!body.contains(&port.to_string()), "{body}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never reported degraded: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.stop().await;
}

/// Another client deletes a calendar after voxgate discovered it: the listing must not fail with
/// the server's 404 until a restart. voxgate discovers again once and lists the calendars that are
/// still there; a create aimed at the deleted default calendar goes to the new default (the first
/// writable calendar), or, when the configured default is the one deleted, fails with a clear error
/// while listing keeps working.
#[tokio::test]
async fn a_calendar_deleted_after_discovery_is_dropped_not_fatal() {
    let server = Arc::new(tokio::task::spawn_blocking(|| Radicale::start("")).await.unwrap());
    let lister = Tools::new(&config(&server.root(), PASSWORD, None));
    let creator = Tools::new(&config(&server.root(), PASSWORD, None));
    let pinned = Tools::new(&config(&server.root(), PASSWORD, Some("Clinic Rota")));
    let week = json!({"start_date": "2024-04-01", "end_date": "2024-04-07"});
    lister.call("create_calendar_event", booking("Dentist", Some("Home")), "s", "c-home").await.unwrap();
    for tools in [&lister, &creator, &pinned] {
        assert_eq!(tools.list(week.clone()).await["count"], 2);
    }

    // Another client deletes the clinic calendar (the default of `lister` and `creator`).
    let deleted = reqwest::Client::new()
        .delete(format!("{}{USER}/clinic/", server.root()))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());

    let after = lister.call("get_calendar_events", week.clone(), "s", "after").await.unwrap();
    assert_eq!(starts(&after), [("Dentist".to_string(), "2024-04-02T14:00:00+02:00".to_string())], "{after}");
    assert_eq!(after["total_count_exact"], true, "{after}");

    // Radicale answers the PUT into the deleted collection 409: discovery runs again and the
    // default is now the first writable calendar left.
    let created = creator.call("create_calendar_event", booking("Ward round", None), "s", "c-default").await.unwrap();
    assert_eq!((created["created"].as_bool(), created["calendar_name"].as_str()), (Some(true), Some("Home")));
    assert_eq!(server.stored("home").len(), 2);

    // The configured default calendar is gone: creating there says so; listing still works.
    let err = pinned.call("create_calendar_event", booking("Ward round", None), "s", "c-pinned").await.unwrap_err();
    assert_eq!(err.code().as_str(), "backend_error");
    assert!(err.public_message().contains("default calendar"), "{}", err.public_message());
    assert_eq!(pinned.list(week.clone()).await["count"], 2);
    assert_eq!(server.stored("home").len(), 2);
}
