//! Who this instance is: `server.instance_id`, by default the hostname — on Kubernetes the pod
//! name, so every log line, span, metric and registry entry names the pod that produced it.

/// Read where Linux keeps it; `HOSTNAME` for other systems and odd containers.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";
/// Used only when the system names no host at all.
const FALLBACK_INSTANCE_ID: &str = "voxgate";

/// The hostname, trimmed; never empty.
pub fn hostname() -> String {
    std::fs::read_to_string(HOSTNAME_FILE)
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| FALLBACK_INSTANCE_ID.to_string())
}

#[cfg(test)]
mod tests {
    use crate::config::ServerConfig;

    #[test]
    fn instance_id_is_the_configured_one_or_the_hostname() {
        let mut server = ServerConfig::default();
        assert_eq!(server.instance_id(), super::hostname());
        assert!(!server.instance_id().is_empty());
        server.instance_id = Some("vg-a".into());
        assert_eq!(server.instance_id(), "vg-a");
    }
}
