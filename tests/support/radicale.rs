//! A real Radicale CalDAV server (PyPI, from the test venv) on a free loopback port with htpasswd
//! auth, seeded with calendars; optionally mounted below a Nextcloud-style prefix
//! (`/remote.php/dav`, with `/.well-known/caldav` redirecting there). Killed on drop.
//! Also a plain CalDAV client that is not voxgate (the Python `caldav` package) to read back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const USER: &str = "alice";
pub const PASSWORD: &str = "correct horse battery";

/// Every Monday 09:00 Europe/Berlin from 2024-03-18, one hour (Berlin starts summer time on 31 March).
pub const WEEKLY: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:weekly-team\r\n\
SUMMARY:Team meeting\r\nDTSTAMP:20240301T000000Z\r\nDTSTART;TZID=Europe/Berlin:20240318T090000\r\n\
DTEND;TZID=Europe/Berlin:20240318T100000\r\nRRULE:FREQ=WEEKLY;BYDAY=MO\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";

pub struct Radicale {
    pub port: u16,
    /// `""`, or the path prefix Radicale is mounted under.
    pub prefix: String,
    pub dir: tempfile::TempDir,
    child: Child,
}

pub fn python() -> PathBuf {
    let path = std::env::var_os("VOXGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python"));
    assert!(path.exists(), "{} is missing: run scripts/test to create the test venv", path.display());
    path
}

impl Radicale {
    /// Calendars of `alice`: `clinic` ("Clinic Rota", events, holding [`WEEKLY`]), `home` ("Home",
    /// events and tasks) and `tasks` (tasks only).
    pub fn start(prefix: &str) -> Radicale {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("collections/collection-root").join(USER);
        for (id, name, components) in
            [("clinic", "Clinic Rota", "VEVENT"), ("home", "Home", "VEVENT,VTODO"), ("tasks", "Tasks", "VTODO")]
        {
            std::fs::create_dir_all(root.join(id)).unwrap();
            let props = serde_json::json!({"tag": "VCALENDAR", "D:displayname": name, "C:supported-calendar-component-set": components});
            std::fs::write(root.join(id).join(".Radicale.props"), props.to_string()).unwrap();
        }
        std::fs::write(root.join("clinic/weekly-team.ics"), WEEKLY).unwrap();
        std::fs::write(dir.path().join("users"), format!("{USER}:{PASSWORD}\n")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = format!(
            "[auth]\ntype = htpasswd\nhtpasswd_filename = {users}\nhtpasswd_encryption = plain\n\
             [storage]\nfilesystem_folder = {storage}\n[rights]\ntype = owner_only\n[logging]\nlevel = warning\n",
            users = dir.path().join("users").display(),
            storage = dir.path().join("collections").display(),
        );
        std::fs::write(dir.path().join("config"), config).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/radicale_server.py");
        let child = Command::new(python())
            .arg(script)
            .arg(dir.path().join("config"))
            .arg(port.to_string())
            .arg(prefix)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let server = Radicale { port, prefix: prefix.trim_end_matches('/').to_string(), dir, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "Radicale did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// The server root (what an operator types first).
    pub fn root(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The DAV root: the root, or the prefix (Nextcloud's `https://HOST/remote.php/dav`).
    pub fn dav(&self) -> String {
        format!("http://127.0.0.1:{}{}/", self.port, self.prefix)
    }

    /// The resources stored in a collection, by file name.
    pub fn stored(&self, collection: &str) -> Vec<String> {
        let dir = self.dir.path().join("collections/collection-root").join(USER).join(collection);
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ics"))
            .collect();
        names.sort();
        names
    }

    /// The events of the calendar with this display name, read with the Python `caldav` client:
    /// `[{"uid", "summary", "dtstart"}]`.
    pub fn read_back(&self, calendar: &str) -> Vec<Value> {
        let script = r#"
import json, sys, caldav
client = caldav.DAVClient(url=sys.argv[1], username=sys.argv[2], password=sys.argv[3])
found = []
for cal in client.principal().calendars():
    if cal.get_display_name() == sys.argv[4]:
        for event in cal.events():
            vevent = event.icalendar_instance.walk("VEVENT")[0]
            found.append({"uid": str(vevent["UID"]), "summary": str(vevent["SUMMARY"]), "dtstart": vevent["DTSTART"].dt.isoformat()})
print(json.dumps(found))
"#;
        let output = Command::new(python())
            .args(["-W", "ignore", "-c", script, &self.dav(), USER, PASSWORD, calendar])
            .output()
            .unwrap();
        assert!(output.status.success(), "caldav client failed: {}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

impl Drop for Radicale {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
