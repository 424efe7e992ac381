//! A real redis-server for the tests that share state across instances or lose Redis on purpose.

use std::time::Duration;

/// A real redis-server on a free loopback port, killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    /// `--requirepass`, when the server asks for one.
    password: Option<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// A server that refuses every client that does not authenticate with `password`.
    pub fn start_with_password(password: &str) -> RedisServer {
        Self::start_with(Some(password.to_string()))
    }

    fn start_with(password: Option<String>) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let mut server = RedisServer { port, child: None, dir, password };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Start (again) on the same port.
    pub fn restart(&mut self) {
        let mut command = std::process::Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path());
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        let child = command
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is not installed: run scripts/test, which installs it");
        self.child = Some(child);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start");
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
