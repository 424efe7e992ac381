//! Authenticating a session before the WebSocket upgrade: the token comes from
//! `Authorization: Bearer`, or from a `voxgate-token.` / `openai-insecure-api-key.` subprotocol
//! (browsers cannot set headers). A token is a JWT (HS256 secret, or RS256/ES256 public key; `exp`,
//! `nbf`, optional `iss`/`aud`) or, in `ticket` mode, a single-use ticket.
//!
//! A JWT may not live longer than `auth.max_token_lifetime_s`, counted both from its `iat` and from
//! now: a leaked year-long token must not open sessions for a year. The 5 s leeway for clocks
//! that differ applies to `nbf` only: a token whose `exp` has passed is refused (401), since it
//! would open a session that ends at once.

use http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::Principal;
use crate::config::{AuthConfig, AuthMode};

/// Subprotocol prefixes that carry a token.
pub const TOKEN_PROTOCOL_PREFIXES: &[&str] = &["voxgate-token.", "openai-insecure-api-key."];

/// Why a session was not authenticated. `Display` is public and never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a token is required")]
    Missing,
    #[error("the token is not valid")]
    Invalid,
    #[error("the token has expired")]
    Expired,
    #[error("the token's lifetime is longer than this server accepts")]
    TooLong,
    #[error("the ticket has already been used or is unknown")]
    TicketUsed,
    #[error("authentication is temporarily unavailable")]
    Unavailable,
}

/// The subprotocols a client offered, in order.
pub fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The token a client presented, from the header or a subprotocol.
pub fn presented_token(headers: &HeaderMap, protocols: &[String]) -> Option<String> {
    let bearer = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(|t| t.trim().to_string());
    bearer.or_else(|| {
        protocols.iter().find_map(|p| {
            TOKEN_PROTOCOL_PREFIXES.iter().find_map(|prefix| p.strip_prefix(prefix)).map(str::to_string)
        })
    })
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    roles: Vec<String>,
    exp: u64,
    #[serde(default)]
    iat: Option<u64>,
}

/// Verifies JWTs with the configured key.
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
    max_lifetime_s: u64,
}

impl JwtVerifier {
    /// `None` when no JWT key is configured.
    pub fn from_config(config: &AuthConfig) -> Result<Option<Self>, String> {
        let (key, alg) = if let Some(secret) = &config.jwt_secret {
            (DecodingKey::from_secret(secret.expose().as_bytes()), Algorithm::HS256)
        } else if let Some(pem) = &config.jwt_public_key_pem {
            let pem = pem.as_bytes();
            match DecodingKey::from_rsa_pem(pem) {
                Ok(key) => (key, Algorithm::RS256),
                Err(_) => match DecodingKey::from_ec_pem(pem) {
                    Ok(key) => (key, Algorithm::ES256),
                    Err(_) => return Err("neither an RSA nor an EC public key in PEM form".into()),
                },
            }
        } else {
            return Ok(None);
        };
        let mut validation = Validation::new(alg);
        validation.validate_nbf = true;
        validation.leeway = 5;
        // A configured issuer or audience is required, not just compared when present:
        // jsonwebtoken checks `iss` and `aud` only in tokens that carry them, so a token minted
        // for another service by the same key, without the claim, would otherwise be accepted.
        let mut required = vec!["exp", "sub"];
        if let Some(issuer) = &config.jwt_issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        match &config.jwt_audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        Ok(Some(Self { key, validation, max_lifetime_s: config.max_token_lifetime_s }))
    }

    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        match jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation) {
            Ok(data) if !data.claims.sub.is_empty() => {
                let claims = data.claims;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or_default();
                // jsonwebtoken applies its leeway to `exp` too; the session would end at `exp`,
                // so such a token would get a socket that opens and closes (security.md: never).
                if claims.exp <= now {
                    return Err(AuthError::Expired);
                }
                let lifetime = claims.exp.saturating_sub(claims.iat.unwrap_or(now).min(now));
                if lifetime > self.max_lifetime_s {
                    return Err(AuthError::TooLong);
                }
                Ok(Principal::new(claims.sub, claims.roles).expiring_at(claims.exp))
            }
            Ok(_) => Err(AuthError::Invalid),
            Err(err) => match err.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => Err(AuthError::Expired),
                _ => Err(AuthError::Invalid),
            },
        }
    }
}

/// The anonymous principal of `auth.mode = "none"`.
pub fn anonymous(config: &AuthConfig) -> Principal {
    Principal::new("anonymous", config.anonymous_roles.clone())
}

/// Does this mode accept JWTs?
pub fn accepts_jwt(mode: AuthMode) -> bool {
    matches!(mode, AuthMode::Jwt | AuthMode::Ticket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn token_from_header_or_subprotocol() {
        let mut headers = HeaderMap::new();
        headers.insert("sec-websocket-protocol", HeaderValue::from_static("realtime, voxgate-token.abc"));
        let protocols = offered_protocols(&headers);
        assert_eq!(protocols, vec!["realtime", "voxgate-token.abc"]);
        assert_eq!(presented_token(&headers, &protocols).as_deref(), Some("abc"));
        headers.insert("authorization", HeaderValue::from_static("Bearer xyz"));
        assert_eq!(presented_token(&headers, &protocols).as_deref(), Some("xyz"));
        let openai = vec!["realtime".to_string(), "openai-insecure-api-key.k1".to_string()];
        assert_eq!(presented_token(&HeaderMap::new(), &openai).as_deref(), Some("k1"));
        assert_eq!(presented_token(&HeaderMap::new(), &[]), None);
    }

    #[test]
    fn tokens_longer_lived_than_the_maximum_are_refused() {
        let config = AuthConfig { jwt_secret: Some(crate::config::Secret::new("k")), max_token_lifetime_s: 3600, ..AuthConfig::default() };
        let verifier = JwtVerifier::from_config(&config).unwrap().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let key = jsonwebtoken::EncodingKey::from_secret(b"k");
        let token = |claims: serde_json::Value| jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap();
        let ok = token(serde_json::json!({"sub": "u", "iat": now, "exp": now + 600}));
        assert!(verifier.verify(&ok).is_ok());
        let long_from_now = token(serde_json::json!({"sub": "u", "exp": now + 7200}));
        assert_eq!(verifier.verify(&long_from_now).unwrap_err(), AuthError::TooLong);
        let long_from_iat = token(serde_json::json!({"sub": "u", "iat": now - 7000, "exp": now + 300}));
        assert_eq!(verifier.verify(&long_from_iat).unwrap_err(), AuthError::TooLong);
    }

    /// The leeway is for `nbf` only: a token whose `exp` has passed would open a session that
    /// closes at once (security.md: a refused client gets an HTTP error, never such a socket).
    #[test]
    fn a_token_past_its_exp_is_refused_despite_the_leeway() {
        let config = AuthConfig { jwt_secret: Some(crate::config::Secret::new("k")), ..AuthConfig::default() };
        let verifier = JwtVerifier::from_config(&config).unwrap().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let key = jsonwebtoken::EncodingKey::from_secret(b"k");
        let token = |claims: serde_json::Value| jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap();
        for exp in [now - 2, now] {
            assert_eq!(verifier.verify(&token(serde_json::json!({"sub": "u", "exp": exp}))).unwrap_err(), AuthError::Expired, "exp = now - {}", now - exp);
        }
        assert!(verifier.verify(&token(serde_json::json!({"sub": "u", "exp": now + 5}))).is_ok());
        // An issuer's clock a little ahead of ours: `nbf` 2 s from now is accepted.
        assert!(verifier.verify(&token(serde_json::json!({"sub": "u", "exp": now + 600, "nbf": now + 2}))).is_ok());
    }

    #[test]
    fn a_configured_issuer_and_audience_must_be_in_the_token() {
        let config = AuthConfig {
            jwt_secret: Some(crate::config::Secret::new("k")),
            jwt_issuer: Some("https://idp.clinic".into()),
            jwt_audience: Some("voxgate".into()),
            ..AuthConfig::default()
        };
        let verifier = JwtVerifier::from_config(&config).unwrap().unwrap();
        let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
        let key = jsonwebtoken::EncodingKey::from_secret(b"k");
        let token = |claims: serde_json::Value| jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap();
        let full = token(serde_json::json!({"sub": "u", "exp": exp, "iss": "https://idp.clinic", "aud": "voxgate"}));
        assert!(verifier.verify(&full).is_ok());
        // Minted by the same key for another service: no audience, or no issuer, or the wrong one.
        for claims in [
            serde_json::json!({"sub": "u", "exp": exp, "iss": "https://idp.clinic"}),
            serde_json::json!({"sub": "u", "exp": exp, "aud": "voxgate"}),
            serde_json::json!({"sub": "u", "exp": exp}),
            serde_json::json!({"sub": "u", "exp": exp, "iss": "https://idp.clinic", "aud": "billing"}),
            serde_json::json!({"sub": "u", "exp": exp, "iss": "https://other", "aud": "voxgate"}),
        ] {
            assert!(verifier.verify(&token(claims.clone())).is_err(), "{claims}");
        }
        // Without an issuer or audience configured, tokens need neither.
        let plain = JwtVerifier::from_config(&AuthConfig { jwt_secret: Some(crate::config::Secret::new("k")), ..AuthConfig::default() })
            .unwrap()
            .unwrap();
        assert!(plain.verify(&token(serde_json::json!({"sub": "u", "exp": exp}))).is_ok());
    }
}
