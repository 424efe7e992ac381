//! Config loading: defaults, file, environment overlay and every validation path.

use std::collections::HashMap;
use std::io::Write;

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn load_toml(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    Config::load(Some(file.path()), &env(vars))
}

#[test]
fn defaults_run_the_simulated_model_on_loopback() {
    let config = Config::load(None, &env(&[])).unwrap();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.upstream.effective_kind(), UpstreamKind::Simulated);
    assert_eq!(config.server.max_frame_bytes, 4 * 1024 * 1024);
    assert_eq!(config.auth.mode, AuthMode::None);
    assert_eq!(config.tools.confirmation_timeout_ms, 60_000);
    assert_eq!(config.audit.path, PathBuf::from("./voxgate-audit.jsonl"));
}

#[test]
fn openai_api_key_selects_openai_and_is_hidden() {
    let config = Config::load(None, &env(&[("OPENAI_API_KEY", "sk-test-123")])).unwrap();
    assert_eq!(config.upstream.effective_kind(), UpstreamKind::Openai);
    assert_eq!(config.upstream.api_key.as_ref().unwrap().expose(), "sk-test-123");
    assert!(!format!("{config:?}").contains("sk-test-123"));
}

#[test]
fn file_then_env_overlay() {
    let config = load_toml(
        "[server]\nlisten = \"127.0.0.1:9000\"\n[tools.search_pubmed]\nrate_limit_per_minute = 5\n",
        &[("VOXGATE_SERVER__LISTEN", "127.0.0.1:9001"), ("VOXGATE_TOOLS__CONFIRMATION_TIMEOUT_MS", "5000")],
    )
    .unwrap();
    assert_eq!(config.server.listen.port(), 9001);
    assert_eq!(config.tools.confirmation_timeout_ms, 5000);
    assert_eq!(config.tools.per_tool["search_pubmed"].rate_limit_per_minute, Some(5));
}

fn key_of(text: &str, vars: &[(&str, &str)]) -> String {
    load_toml(text, vars).unwrap_err().key
}

/// (TOML, environment, the key the error must name)
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn every_validation_error_names_its_key() {
    let cases: &[Case] = &[
        ("[server]\nlisten = \"nope\"", &[], "server.listen"),
        ("[server]\nlisten = 5", &[], "server.listen"),
        ("[server]\nlisen = \"127.0.0.1:1\"", &[], "server.lisen"),
        ("[server]\nmax_frame_bytes = 10", &[], "server.max_frame_bytes"),
        ("[server]\nmax_sessions = 0", &[], "server.max_sessions"),
        ("[upstream]\nmax_frame_bytes = 1000", &[], "upstream.max_frame_bytes"),
        ("[server]\nsession_threads = 100000", &[], "server.session_threads"),
        ("[server]\nmax_sessions_per_user = 0", &[], "server.max_sessions_per_user"),
        ("[server]\nclient_send_timeout_ms = 0", &[], "server.client_send_timeout_ms"),
        ("[server]\nallowed_origins = [\"not an origin\"]", &[], "server.allowed_origins[0]"),
        ("[server]\ninstance_id = \"pod a\"", &[], "server.instance_id"),
        ("[server]\ninstance_id = \"\"", &[], "server.instance_id"),
        ("[redis]\nsession_ttl_ms = 10", &[], "redis.session_ttl_ms"),
        // Under three Redis call timeouts: one slow refresh would let the entries lapse.
        ("[redis]\nsession_ttl_ms = 1499", &[], "redis.session_ttl_ms"),
        ("[upstream]\nkind = \"bogus\"", &[], "upstream.kind"),
        ("[upstream]\nkind = \"openai\"", &[], "upstream.api_key"),
        ("[upstream]\nkind = \"openai\"\napi_key = \"k\"\nurl = \"http://x\"", &[], "upstream.url"),
        ("[upstream]\nkind = \"azure\"\napi_key = \"k\"\nurl = \"wss://x\"\ndeployment = \"d\"", &[], "upstream.deployment"),
        ("[upstream]\nconnect_timeout_ms = 0", &[], "upstream.connect_timeout_ms"),
        ("[upstream]\nprotocol = \"v2\"", &[], "upstream.protocol"),
        ("[upstream]\nresume_attempts = 0", &[], "upstream.resume_attempts"),
        ("[upstream]\nresume_attempts = 11", &[], "upstream.resume_attempts"),
        ("[upstream]\nresume_max_items = 0", &[], "upstream.resume_max_items"),
        ("[upstream]\nsend_timeout_ms = 0", &[], "upstream.send_timeout_ms"),
        // An empty key is no key: refused where a key is required, not sent as `Bearer `.
        ("[upstream]\nkind = \"openai\"\napi_key = \"\"", &[], "upstream.api_key"),
        ("[upstream]\nkind = \"openai\"", &[("VOXGATE_UPSTREAM__API_KEY", "")], "upstream.api_key"),
        // An "unlimited" guess would panic the semaphore that holds the places.
        ("[server]\nmax_sessions = 9223372036854775807", &[], "server.max_sessions"),
        ("[server]\nmax_sessions = 1000001", &[], "server.max_sessions"),
        ("[auth]\nmode = \"jwt\"", &[], "auth.mode"),
        // JWT mode accepts JWTs only: an admin token alone would start a proxy that refuses everyone.
        ("[auth]\nmode = \"jwt\"\nadmin_token = \"0123456789abcdef0123456789abcdef\"", &[], "auth.mode"),
        ("[auth]\nmode = \"ticket\"\njwt_secret = \"0123456789abcdef0123456789abcdef\"", &[], "auth.admin_token"),
        ("[auth]\nmode = \"jwt\"\njwt_secret = \"short\"", &[], "auth.jwt_secret"),
        ("[auth]\nadmin_token = \"short\"", &[], "auth.admin_token"),
        // A short or empty key makes every user hash reversible from a list of staff ids.
        ("[auth]\nuser_hash_key = \"shared-key\"", &[], "auth.user_hash_key"),
        ("", &[("VOXGATE_AUTH__USER_HASH_KEY", "")], "auth.user_hash_key"),
        ("[auth]\njwt_secret = \"0123456789abcdef0123456789abcdef\"\njwt_public_key_pem = \"x\"", &[], "auth.jwt_public_key_pem"),
        // A key that does not parse is a config error (exit 2, and check-config says so), not a
        // failed start.
        ("[auth]\nmode = \"jwt\"\njwt_public_key_pem = \"not a key\"", &[], "auth.jwt_public_key_pem"),
        ("[server]\nlisten = \"0.0.0.0:8080\"", &[], "auth.mode"),
        ("[audit]\npath = \"\"", &[], "audit.path"),
        ("[redis]\nurl = \"http://x\"", &[], "redis.url"),
        ("[telemetry]\notlp_endpoint = \"nope\"", &[], "telemetry.otlp_endpoint"),
        ("[telemetry]\notlp_protocol = \"udp\"", &[], "telemetry.otlp_protocol"),
        ("[tools]\nconfirmation_timeout_ms = 5", &[], "tools.confirmation_timeout_ms"),
        // Past tokio-util's timer wheel (2^36 ms) a parked call's deadline panicked its session.
        ("[tools]\nconfirmation_timeout_ms = 100000000000", &[], "tools.confirmation_timeout_ms"),
        ("[tools.no_such_tool]\nenabled = true", &[], "tools.no_such_tool"),
        ("[tools.search_pubmed]\ntimeout_ms = 0", &[], "tools.search_pubmed.timeout_ms"),
        ("[tools.search_pubmed]\nrate_limit_per_minute = 0", &[], "tools.search_pubmed.rate_limit_per_minute"),
        ("[tools.search_pubmed]\nbogus = 1", &[], "tools.search_pubmed.bogus"),
        ("[tools.create_calendar_event]\nrequires_confirmation = false", &[], "tools.create_calendar_event.requires_confirmation"),
        ("[backends.calendar]\nkind = \"caldav\"", &[], "backends.calendar.url"),
        // No CalDAV PUT starts with under 2.5 s of the call left: every create would fail.
        (
            "[backends.calendar]\nkind = \"caldav\"\nurl = \"https://cal.example/\"\n[tools.create_calendar_event]\ntimeout_ms = 2000",
            &[],
            "tools.create_calendar_event.timeout_ms",
        ),
        ("[backends.calendar]\ntimezone = \"Mars/Olympus\"", &[], "backends.calendar.timezone"),
        ("[backends.pubmed]\nbase_url = \"ftp://x\"", &[], "backends.pubmed.base_url"),
        ("", &[("VOXGATE_SERVER__MAX_SESSIONS", "many")], "server.max_sessions"),
    ];
    for (text, vars, key) in cases {
        assert_eq!(&key_of(text, vars), key, "config {text:?} {vars:?}");
    }
}

#[test]
fn limits_at_their_bounds_are_accepted() {
    let config = load_toml(
        "[server]\nmax_sessions = 1000000\n[upstream]\nsend_timeout_ms = 1\n[auth]\nuser_hash_key = \"0123456789abcdef\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.server.max_sessions, 1_000_000);
    assert_eq!(config.upstream.send_timeout_ms, 1);
}

/// A CalDAV create needs 2.5 s for its `PUT` and the look for its event, and a little for the
/// discovery before it: a shorter `timeout_ms` is refused with the minimum; the local backend has
/// no such floor.
#[test]
fn a_caldav_create_timeout_too_short_for_a_put_is_refused() {
    let caldav = "[backends.calendar]\nkind = \"caldav\"\nurl = \"https://cal.example/\"\n";
    let err = load_toml(&format!("{caldav}[tools.create_calendar_event]\ntimeout_ms = 2500"), &[]).unwrap_err();
    assert_eq!(err.key, "tools.create_calendar_event.timeout_ms");
    assert!(err.to_string().contains("at least 3000"), "{err}");
    load_toml(&format!("{caldav}[tools.create_calendar_event]\ntimeout_ms = 3000"), &[]).unwrap();
    load_toml(&format!("{caldav}[tools.get_calendar_events]\ntimeout_ms = 1000"), &[]).unwrap();
    load_toml("[tools.create_calendar_event]\ntimeout_ms = 1000", &[]).unwrap();
}

#[test]
fn an_empty_upstream_key_is_unset_and_openai_api_key_fills_it() {
    // An empty k8s secret or compose variable: as if unset, like an empty OPENAI_API_KEY.
    let config = Config::load(None, &env(&[("VOXGATE_UPSTREAM__API_KEY", "")])).unwrap();
    assert!(config.upstream.api_key.is_none());
    assert_eq!(config.upstream.effective_kind(), UpstreamKind::Simulated);
    let config =
        Config::load(None, &env(&[("VOXGATE_UPSTREAM__API_KEY", ""), ("OPENAI_API_KEY", "sk-from-openai")])).unwrap();
    assert_eq!(config.upstream.api_key.as_ref().unwrap().expose(), "sk-from-openai");
    assert_eq!(config.upstream.effective_kind(), UpstreamKind::Openai);
}

/// docs/config.md promises a string for anything but a number, boolean, array or inline table:
/// `2024-10-21` reads as a TOML date, which must still arrive as the text written.
#[test]
fn an_env_value_that_looks_like_a_date_stays_a_string() {
    let config = Config::load(None, &env(&[("VOXGATE_UPSTREAM__API_VERSION", "2024-10-21")])).unwrap();
    assert_eq!(config.upstream.api_version.as_deref(), Some("2024-10-21"));
    let config = Config::load(None, &env(&[("VOXGATE_UPSTREAM__MODEL", "2024-10-21"), ("VOXGATE_SERVER__INSTANCE_ID", "2024-10-21")])).unwrap();
    assert_eq!(config.upstream.model, "2024-10-21");
    assert_eq!(config.server.instance_id(), "2024-10-21");
    let config = Config::load(None, &env(&[("VOXGATE_MCP__SERVERS__LAB__URL", "https://lab.example/mcp"), ("VOXGATE_MCP__SERVERS__LAB__HEADERS__X_SINCE", "2024-10-21")])).unwrap();
    assert_eq!(config.mcp.servers["lab"].headers["X_SINCE"].expose(), "2024-10-21");
}

#[test]
fn public_listen_with_auth_none_needs_the_explicit_switch() {
    let config = load_toml(
        "[server]\nlisten = \"0.0.0.0:8080\"\nallow_unauthenticated_public = true\n",
        &[],
    )
    .unwrap();
    assert!(config.server.allow_unauthenticated_public);
}

#[test]
fn unreadable_file_and_bad_toml_are_refused() {
    let err = Config::load(Some(Path::new("/nonexistent/voxgate.toml")), &env(&[])).unwrap_err();
    assert_eq!(err.key, "--config");
    assert_eq!(load_toml("[server", &[]).unwrap_err().key, "--config");
}

#[test]
fn summary_never_prints_secrets() {
    let config = load_toml(
        "[upstream]\napi_key = \"sk-live-SECRET1\"\n[auth]\nadmin_token = \"admin-SECRET2-0123456789\"\n",
        &[("VOXGATE_REDIS__URL", "redis://:SECRET3@127.0.0.1:6379")],
    )
    .unwrap();
    let text = summary(&config);
    assert!(text.contains("upstream.api_key = (set)"), "{text}");
    assert!(text.contains("redis.url = (set)"), "{text}");
    for secret in ["SECRET1", "SECRET2", "SECRET3"] {
        assert!(!text.contains(secret), "{text}");
    }
}

#[test]
fn summary_hides_credentials_inside_urls() {
    let config = load_toml(
        "[upstream]\nkind = \"azure\"\napi_key = \"k\"\nurl = \"wss://USERNAME1:SECRET1@az.example/openai/v1/realtime?api-key=SECRET2\"\n\
         [telemetry]\notlp_endpoint = \"https://COLLECTOR1:SECRET3@otel.example:4318/?token=SECRET4#SECRET5\"\n\
         [backends.evidence]\nbase_url = \"https://evidence.example/v1?api-key=SECRET6\"\n",
        &[],
    )
    .unwrap();
    let text = summary(&config);
    for secret in ["SECRET1", "SECRET2", "SECRET3", "SECRET4", "SECRET5", "SECRET6", "USERNAME1", "COLLECTOR1"] {
        assert!(!text.contains(secret), "{secret}: {text}");
    }
    assert!(text.contains("upstream.url = wss://***@az.example/openai/v1/realtime?***\n"), "{text}");
    assert!(text.contains("telemetry.otlp_endpoint = https://***@otel.example:4318/?***#***\n"), "{text}");
    assert!(text.contains("backends.evidence.base_url = https://evidence.example/v1?***\n"), "{text}");
    // A URL with nothing to hide is printed as written.
    let config = load_toml("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n", &[]).unwrap();
    assert!(summary(&config).contains("telemetry.otlp_endpoint = http://127.0.0.1:4318\n"));
}

#[test]
fn a_secret_given_as_digits_is_refused_without_being_printed() {
    // An env value is read as TOML, so an all-digit secret arrives as an integer.
    let err = Config::load(None, &env(&[("VOXGATE_AUTH__ADMIN_TOKEN", "4242424242424242")])).unwrap_err();
    assert_eq!(err.key, "auth.admin_token");
    assert!(!err.to_string().contains("4242"), "{err}");
    assert!(err.reason.contains("integer") && err.reason.contains("expected"), "{err}");
    // The same in the file, and for a float and a boolean.
    for value in ["12345678", "1234.5678", "true"] {
        let err = load_toml(&format!("[auth]\nadmin_token = {value}\n"), &[]).unwrap_err();
        assert!(!err.to_string().contains(value), "{err}");
    }
    assert_eq!(super::without_value("invalid type: floating point `1.5`, expected a string"), "invalid type: floating point, expected a string");
    assert_eq!(super::without_value("invalid value: string \"a b\", expected a port"), "invalid value: string, expected a port");
    assert_eq!(super::without_value("missing field `url`"), "missing field `url`");
}

#[test]
fn env_overlay_keeps_the_case_of_mcp_env_names() {
    let config = load_toml(
        "[mcp.servers.lab]\ncommand = [\"lab-server\"]\nenv = { lab_token = \"from-file\" }\n",
        &[
            ("VOXGATE_MCP__SERVERS__LAB__ENV__LAB_TOKEN", "t0ken"),
            ("VOXGATE_MCP__SERVERS__LAB__ENV__Mixed_Case", "m"),
            // A name with `__` in it: everything after `ENV__` is the name.
            ("VOXGATE_MCP__SERVERS__LAB__ENV__MY__VAR", "v"),
            // Schema keys are still matched whatever their case.
            ("VOXGATE_MCP__SERVERS__LAB__Allow", "[\"lookup\"]"),
        ],
    )
    .unwrap();
    let lab = &config.mcp.servers["lab"];
    let names: Vec<&str> = lab.env.keys().map(String::as_str).collect();
    assert_eq!(names, ["LAB_TOKEN", "MY__VAR", "Mixed_Case", "lab_token"], "env names are data");
    assert_eq!(lab.env["LAB_TOKEN"].expose(), "t0ken");
    assert_eq!(lab.env["lab_token"].expose(), "from-file", "a different variable for the child");
    assert_eq!(lab.allow, ["lookup"]);
}

#[test]
fn env_overlay_matches_names_and_headers_of_the_file_whatever_their_case() {
    let config = load_toml(
        "[mcp.servers.Paging]\nurl = \"https://paging.example/mcp\"\nallow = [\"getPager\"]\n\
         headers = { Authorization = \"Bearer old\" }\n[mcp.servers.Paging.policy.getPager]\nconfirm = true\n",
        &[
            ("VOXGATE_MCP__SERVERS__PAGING__HEADERS__AUTHORIZATION", "Bearer new"),
            ("VOXGATE_MCP__SERVERS__PAGING__HEADERS__X-Api-Key", "k"),
            ("VOXGATE_MCP__SERVERS__PAGING__POLICY__GETPAGER__CONFIRM", "false"),
            ("VOXGATE_TOOLS__SEARCH_PUBMED__RATE_LIMIT_PER_MINUTE", "7"),
        ],
    )
    .unwrap();
    assert_eq!(config.mcp.servers.keys().collect::<Vec<_>>(), ["Paging"], "no second server");
    let paging = &config.mcp.servers["Paging"];
    let headers: Vec<&str> = paging.headers.keys().map(String::as_str).collect();
    assert_eq!(headers, ["Authorization", "X-Api-Key"], "overridden, not sent twice");
    assert_eq!(paging.headers["Authorization"].expose(), "Bearer new");
    assert_eq!(paging.policy["getPager"].confirm, Some(false));
    assert_eq!(config.tools.per_tool["search_pubmed"].rate_limit_per_minute, Some(7));
}

#[test]
fn env_overlay_keeps_the_lower_case_entry_and_refuses_an_ambiguous_name() {
    let file = "[mcp.servers.lab]\nurl = \"https://lab.example/mcp\"\n[mcp.servers.Lab]\nurl = \"https://other.example/mcp\"\n";
    // As every earlier release did: `LAB` names the lower-case entry, `lab`.
    let config = load_toml(file, &[("VOXGATE_MCP__SERVERS__LAB__HEADERS__AUTHORIZATION", "Bearer lab")]).unwrap();
    assert_eq!(config.mcp.servers["lab"].headers["AUTHORIZATION"].expose(), "Bearer lab");
    assert!(config.mcp.servers["Lab"].headers.is_empty(), "the other server never gets lab's credential");
    // Two entries that differ only in case and neither is what the variable resolves to: refused.
    let file = "[mcp.servers.Lab]\nurl = \"https://lab.example/mcp\"\n[mcp.servers.LAb]\nurl = \"https://other.example/mcp\"\n";
    let err = load_toml(file, &[("VOXGATE_MCP__SERVERS__LAB__HEADERS__AUTHORIZATION", "Bearer lab")]).unwrap_err();
    assert!(err.reason.contains("more than one entry"), "{err}");
    assert!(!err.to_string().contains("Bearer"), "{err}");
}

#[test]
fn a_quoted_value_holding_the_word_expected_is_not_printed() {
    assert_eq!(
        super::without_value("invalid value: string \"a, expected b\", expected a port"),
        "invalid value: string, expected a port"
    );
}

/// This build's gRPC exporter has no TLS: an `https://` gRPC collector used to pass `check-config`
/// and then stop `run` (exit 1, the URL and its credentials on stderr). It is a config error now,
/// which never prints the URL.
#[test]
fn a_grpc_collector_over_https_is_refused_without_its_credentials() {
    let text = "[telemetry]\notlp_protocol = \"grpc\"\notlp_endpoint = \"https://u:SECRET7@c.example:4317\"\n";
    let err = load_toml(text, &[]).unwrap_err();
    assert_eq!(err.key, "telemetry.otlp_endpoint", "{err}");
    assert!(err.reason.contains("http/protobuf"), "{err}");
    assert!(!err.to_string().contains("SECRET7"), "{err}");
    // gRPC over plain http, and https over http/protobuf (reqwest with rustls), stay accepted.
    load_toml("[telemetry]\notlp_protocol = \"grpc\"\notlp_endpoint = \"http://c.example:4317\"\n", &[]).unwrap();
    load_toml("[telemetry]\notlp_endpoint = \"https://u:SECRET7@c.example:4318\"\n", &[]).unwrap();
}

/// The Azure preview form (`deployment` + `api_version`) speaks the beta protocol: with the GA
/// default, voxgate's own tool injection (`session.type`) was refused by Azure and the session
/// ran without server tools. Unset, the protocol is beta there; `ga` written out is refused.
#[test]
fn the_azure_preview_form_speaks_the_beta_protocol() {
    let preview = "[upstream]\nkind = \"azure\"\napi_key = \"k\"\nurl = \"wss://az.example/openai/realtime\"\n\
                   deployment = \"d\"\napi_version = \"2025-04-01-preview\"\n";
    assert_eq!(load_toml(preview, &[]).unwrap().upstream.protocol, UpstreamProtocol::Beta, "unset: beta");
    let beta = format!("{preview}protocol = \"beta\"\n");
    assert_eq!(load_toml(&beta, &[]).unwrap().upstream.protocol, UpstreamProtocol::Beta);
    let err = load_toml(&format!("{preview}protocol = \"ga\"\n"), &[]).unwrap_err();
    assert_eq!(err.key, "upstream.protocol", "{err}");
    assert!(err.reason.contains("beta"), "{err}");
    let err = load_toml(preview, &[("VOXGATE_UPSTREAM__PROTOCOL", "ga")]).unwrap_err();
    assert_eq!(err.key, "upstream.protocol", "{err}");
    // Set through the environment alone, the preview form gets beta too.
    let vars = [
        ("VOXGATE_UPSTREAM__KIND", "azure"),
        ("VOXGATE_UPSTREAM__API_KEY", "k"),
        ("VOXGATE_UPSTREAM__URL", "wss://az.example/openai/realtime"),
        ("VOXGATE_UPSTREAM__DEPLOYMENT", "d"),
        ("VOXGATE_UPSTREAM__API_VERSION", "2025-04-01-preview"),
    ];
    assert_eq!(Config::load(None, &env(&vars)).unwrap().upstream.protocol, UpstreamProtocol::Beta);
    // The GA form keeps the GA default.
    let ga = "[upstream]\nkind = \"azure\"\napi_key = \"k\"\nurl = \"wss://az.example/openai/v1/realtime\"\nmodel = \"d\"\n";
    assert_eq!(load_toml(ga, &[]).unwrap().upstream.protocol, UpstreamProtocol::Ga);
}

/// `deployment` and `api_version` mean something only to `kind = "azure"` (`upstream::openai`):
/// left over in another kind's config they change neither its protocol default (beta would be
/// refused by api.openai.com) nor what may be written.
#[test]
fn deployment_keys_set_the_protocol_only_for_azure() {
    let leftovers = "deployment = \"d\"\napi_version = \"2025-04-01-preview\"\n";
    let openai = format!("[upstream]\nkind = \"openai\"\napi_key = \"k\"\n{leftovers}");
    let implied = format!("[upstream]\napi_key = \"k\"\n{leftovers}");
    let simulated = format!("[upstream]\nkind = \"simulated\"\n{leftovers}");
    for config in [&openai, &implied, &simulated] {
        assert_eq!(load_toml(config, &[]).unwrap().upstream.protocol, UpstreamProtocol::Ga, "unset: {config}");
        let ga = format!("{config}protocol = \"ga\"\n");
        assert_eq!(load_toml(&ga, &[]).unwrap().upstream.protocol, UpstreamProtocol::Ga, "written: {config}");
    }
    // Through the environment alone: an API key implies openai.
    let vars = [("OPENAI_API_KEY", "k"), ("VOXGATE_UPSTREAM__DEPLOYMENT", "d"), ("VOXGATE_UPSTREAM__API_VERSION", "2025-04-01-preview")];
    assert_eq!(Config::load(None, &env(&vars)).unwrap().upstream.protocol, UpstreamProtocol::Ga);
}
