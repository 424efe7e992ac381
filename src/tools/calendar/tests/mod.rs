//! Tests of the calendar family: parsing (`ics`), the local `.ics` backend (`local`), repeating
//! events (`recur`), and the two tools end to end through the registry's schema validation
//! (`tools`). The CalDAV backend is tested against a real Radicale in `tests/caldav.rs`.

mod ics;
mod local;
mod recur;
mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono_tz::Tz;
use serde_json::Value;

use super::{CalendarBackend, LocalCalendar, tools_with_backend};
use crate::config::ToolsConfig;
use crate::policy::Principal;
use crate::tools::registry::{RegisteredTool, ToolRegistry};
use crate::tools::{CallContext, ToolError};

/// A calendar file in a fresh temp dir (the dir must outlive the test).
struct Fixture {
    _dir: tempfile::TempDir,
    backend: Arc<LocalCalendar>,
    registry: ToolRegistry,
}

impl Fixture {
    fn new(tz: Tz) -> Self {
        Self::with_file(tz, None)
    }

    /// `contents` is written to the calendar file before it is opened.
    fn with_file(tz: Tz, contents: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cal").join("calendar.ics");
        if let Some(text) = contents {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        let backend = Arc::new(LocalCalendar::open(&path, tz).unwrap());
        let shared: Arc<dyn CalendarBackend> = backend.clone();
        let registry = ToolRegistry::from_tools(tools_with_backend(shared), &ToolsConfig::default()).unwrap();
        Self { _dir: dir, backend, registry }
    }

    fn path(&self) -> PathBuf {
        self.backend.path().to_path_buf()
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.path()).unwrap()
    }

    fn tool(&self, name: &str) -> &Arc<RegisteredTool> {
        self.registry.get(name).unwrap()
    }

    /// Validate against the compiled schema (as a session does), then call.
    async fn call(&self, name: &str, args: Value, session: &str, call: &str) -> Result<Value, ToolError> {
        let tool = self.tool(name);
        tool.validate(&args)?;
        tool.tool.call(args, ctx(session, call)).await.map(|out| out.result)
    }

    async fn get(&self, args: Value) -> Value {
        self.call("get_calendar_events", args, "s", "get").await.unwrap()
    }

    async fn create(&self, args: Value, session: &str, call: &str) -> Value {
        self.call("create_calendar_event", args, session, call).await.unwrap()
    }
}

fn ctx(session: &str, call: &str) -> CallContext {
    CallContext { session_id: session.into(), call_id: call.into(), principal: Principal::new("tester", Vec::new()) }
}

fn tz(name: &str) -> Tz {
    name.parse().unwrap()
}

fn vevent_count(text: &str) -> usize {
    text.matches("BEGIN:VEVENT").count()
}

/// Files in `dir` other than the calendar and its lock file (left-over temp files).
fn stray_files(dir: &Path, calendar: &Path) -> Vec<PathBuf> {
    let lock = super::local::lock_path(calendar);
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p != calendar && *p != lock).collect()
}
