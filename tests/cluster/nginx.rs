//! The load balancer: a real nginx proxying WebSockets round robin over the instances.

use super::*;

/// A real nginx on a free port, load-balancing (round robin) WebSockets over `backends`; its
/// config, logs, pid and temp files all live in its own temp dir, so it needs no system paths.
pub(crate) struct Nginx {
    pub(crate) port: u16,
    pub(crate) child: std::process::Child,
    pub(crate) dir: tempfile::TempDir,
}

impl Nginx {
    pub(crate) fn start(backends: &[&str]) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let servers: String = backends
            .iter()
            .map(|b| format!("    server {b} max_fails=1 fail_timeout=30s;\n"))
            .collect();
        // `user root`: when the test runs as root the workers may use the temp dir; otherwise
        // nginx ignores the directive with a warning.
        let config = format!(
            r#"user root;
worker_processes 1;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
  upstream voxgate {{
{servers}  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://voxgate;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_read_timeout 3600s;
      proxy_send_timeout 3600s;
      # A draining instance answers 503 and a stopped one refuses: try the next.
      proxy_next_upstream error timeout http_502 http_503;
    }}
  }}
}}
"#
        );
        std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
        let binary = if Path::new("/usr/sbin/nginx").exists() {
            "/usr/sbin/nginx"
        } else {
            "nginx"
        };
        let child = std::process::Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-g")
            .arg(format!("daemon off; pid {d}/nginx.pid;"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx is not installed: run scripts/test, which installs it");
        let mut nginx = Nginx { port, child, dir };
        let deadline = std::time::Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}): {}", nginx.error_log());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nginx did not start: {}",
                nginx.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    pub(crate) fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/v1/realtime", self.port)
    }

    pub(crate) fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
