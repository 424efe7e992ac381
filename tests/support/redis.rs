//! A real redis-server for the tests that share state across instances or lose Redis on purpose.

use std::time::Duration;

/// A real redis-server on a free loopback port, killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    /// `--requirepass`, when the server asks for one.
    password: Option<String>,
    /// Served over TLS only (the port is its TLS port), with a certificate from a test CA.
    tls: bool,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// A server that refuses every client that does not authenticate with `password`.
    pub fn start_with_password(password: &str) -> RedisServer {
        Self::start_with(Some(password.to_string()))
    }

    /// A server that speaks TLS only, with a certificate for 127.0.0.1 from a CA made for it
    /// ([`Self::ca_file`]); `rediss://` URLs ([`Self::tls_url`]).
    pub fn start_with_tls() -> RedisServer {
        let mut server = Self::prepare(None, true);
        let openssl = |args: &[&str]| {
            let status = std::process::Command::new("openssl")
                .args(args)
                .current_dir(server.dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("openssl is not installed");
            assert!(status.success(), "openssl {args:?}");
        };
        std::fs::write(server.dir.path().join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=voxgate test CA"]);
        openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
        openssl(&["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext"]);
        server.restart();
        server
    }

    /// The CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.crt")
    }

    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    fn start_with(password: Option<String>) -> RedisServer {
        let mut server = Self::prepare(password, false);
        server.restart();
        server
    }

    fn prepare(password: Option<String>, tls: bool) -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        RedisServer { port, child: None, dir, password, tls }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Start (again) on the same port.
    pub fn restart(&mut self) {
        let mut command = std::process::Command::new("redis-server");
        command.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]).arg("--dir").arg(self.dir.path());
        if self.tls {
            let file = |name: &str| self.dir.path().join(name).display().to_string();
            command.args(["--port", "0", "--tls-port", &self.port.to_string(), "--tls-auth-clients", "no"]);
            command.args(["--tls-cert-file", &file("server.crt"), "--tls-key-file", &file("server.key"), "--tls-ca-cert-file", &file("ca.crt")]);
        } else {
            command.args(["--port", &self.port.to_string()]);
        }
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
