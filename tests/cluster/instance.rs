//! One voxgate process of the cluster: its config (shared Redis, the fake upstream, a short
//! registry TTL), its temp dir and audit log.

use super::*;

/// One voxgate process.
pub(crate) struct Instance {
    pub(crate) id: String,
    pub(crate) addr: String,
    pub(crate) child: tokio::process::Child,
    pub(crate) dir: tempfile::TempDir,
}

impl Instance {
    pub(crate) async fn start(index: usize, fake: &FakeUpstream, redis: &RedisServer) -> Instance {
        let dir = tempfile::tempdir().unwrap();
        let id = format!("vg-{index}");
        let config = format!(
            r#"
[server]
listen = "127.0.0.1:0"
instance_id = "{id}"
max_sessions_per_user = 2
drain_timeout_ms = 3000
[upstream]
kind = "openai"
url = "ws://{fake}/v1/realtime"
api_key = "sk-test-upstream-key"
[auth]
mode = "ticket"
jwt_secret = "{SECRET}"
admin_token = "{ADMIN}"
user_hash_key = "a-user-hash-key-every-instance-shares"
[redis]
url = "{redis}"
session_ttl_ms = {SESSION_TTL_MS}
[audit]
path = "{audit}"
[backends.calendar]
path = "{calendar}"
[tools.calculate_medical_score]
rate_limit_per_minute = 3
"#,
            fake = fake.addr,
            redis = redis.url(),
            audit = dir.path().join("audit.jsonl").display(),
            calendar = dir.path().join("calendar.ics").display(),
        );
        let (child, addr) = spawn_voxgate(&config, dir.path()).await;
        Instance {
            id,
            addr,
            child,
            dir,
        }
    }

    pub(crate) fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    pub(crate) fn pid(&self) -> String {
        self.child.id().unwrap().to_string()
    }

    pub(crate) async fn sessions(&self) -> Value {
        support::admin_sessions(&self.addr, ADMIN).await
    }

    pub(crate) async fn delete_session(&self, id: &str) -> u16 {
        delete_session(&self.addr, id).await
    }

    pub(crate) async fn mint_ticket(&self, sub: &str) -> String {
        support::mint_ticket(&self.addr, ADMIN, json!({"sub": sub})).await
    }

    pub(crate) async fn signal(&self, signal: &str) {
        let status = tokio::process::Command::new("kill")
            .args([signal, &self.pid()])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }
}

/// `DELETE /admin/sessions/{id}` on the instance at `addr`; the status it answers.
pub(crate) async fn delete_session(addr: impl std::fmt::Display, id: &str) -> u16 {
    let url = format!("http://{addr}/admin/sessions/{id}");
    reqwest::Client::new().delete(url).bearer_auth(ADMIN).send().await.unwrap().status().as_u16()
}
