//! The browser client, embedded in the binary: `GET /` (the page) and `GET /assets/{file}` (its
//! ES modules — the client and its internals, its audio half, the page's wiring, views and
//! labels —, the capture AudioWorklet, the stylesheet, the icon).
//!
//! Every response carries `cache-control: no-cache` (a new binary serves new assets at once) and a
//! strict `content-security-policy`: everything from this origin only, no inline scripts or styles,
//! WebSockets to any host (the page may be pointed at another voxgate), nothing else. The page needs
//! no build step: the files under `assets/` are served exactly as written.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The page's content security policy: same-origin scripts, styles, images and media; WebSockets;
/// no plugins, no framing, no `<base>` tricks, no form posts elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; media-src 'self' blob:; font-src 'self'; \
     connect-src 'self' ws: wss:; worker-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

const JS: &str = "text/javascript; charset=utf-8";

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The file name under `/assets/`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// The page itself, served at `/` (and as `/assets/index.html`).
pub const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("../../assets/index.html"),
};

/// Every file served under `/assets/`.
pub const ASSETS: &[Asset] = &[
    INDEX,
    // The client module (the public entry point) and the modules it imports.
    Asset { name: "voxgate-client.js", content_type: JS, body: include_str!("../../assets/voxgate-client.js") },
    Asset { name: "voxgate-protocol.js", content_type: JS, body: include_str!("../../assets/voxgate-protocol.js") },
    Asset { name: "voxgate-server-events.js", content_type: JS, body: include_str!("../../assets/voxgate-server-events.js") },
    Asset { name: "voxgate-tool-calls.js", content_type: JS, body: include_str!("../../assets/voxgate-tool-calls.js") },
    Asset { name: "voxgate-microphone.js", content_type: JS, body: include_str!("../../assets/voxgate-microphone.js") },
    Asset { name: "voxgate-audio.js", content_type: JS, body: include_str!("../../assets/voxgate-audio.js") },
    Asset { name: "pcm-capture-worklet.js", content_type: JS, body: include_str!("../../assets/pcm-capture-worklet.js") },
    // The page: its wiring, its views and the words it shows.
    Asset { name: "app.js", content_type: JS, body: include_str!("../../assets/app.js") },
    Asset { name: "dom.js", content_type: JS, body: include_str!("../../assets/dom.js") },
    Asset { name: "errors-view.js", content_type: JS, body: include_str!("../../assets/errors-view.js") },
    Asset { name: "audio-controls.js", content_type: JS, body: include_str!("../../assets/audio-controls.js") },
    Asset { name: "transcript-view.js", content_type: JS, body: include_str!("../../assets/transcript-view.js") },
    Asset { name: "activity-view.js", content_type: JS, body: include_str!("../../assets/activity-view.js") },
    Asset { name: "sources-view.js", content_type: JS, body: include_str!("../../assets/sources-view.js") },
    Asset { name: "confirm-dialog.js", content_type: JS, body: include_str!("../../assets/confirm-dialog.js") },
    Asset { name: "labels.js", content_type: JS, body: include_str!("../../assets/labels.js") },
    Asset { name: "style.css", content_type: "text/css; charset=utf-8", body: include_str!("../../assets/style.css") },
    Asset { name: "favicon.svg", content_type: "image/svg+xml", body: include_str!("../../assets/favicon.svg") },
];

/// The routes of the browser client; stateless, so they merge into a router of any state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/favicon.ico", get(favicon))
        .route("/assets/{file}", get(asset))
}

/// `GET /`: the page.
pub async fn index() -> Response {
    serve(&INDEX)
}

/// `GET /favicon.ico`: browsers ask for it whatever the page says; answer with the SVG icon.
pub async fn favicon() -> Response {
    match find("favicon.svg") {
        Some(asset) => serve(asset),
        None => not_found(),
    }
}

/// `GET /assets/{file}`: one embedded file, or 404.
pub async fn asset(Path(file): Path<String>) -> Response {
    match find(&file) {
        Some(asset) => serve(asset),
        None => not_found(),
    }
}

/// The embedded file with this name.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.name == name)
}

fn serve(asset: &Asset) -> Response {
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    security_headers(headers);
    response
}

fn not_found() -> Response {
    let mut response = (StatusCode::NOT_FOUND, "not found\n").into_response();
    security_headers(response.headers_mut());
    response
}

fn security_headers(headers: &mut axum::http::HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::HeaderName::from_static("permissions-policy"),
        HeaderValue::from_static("microphone=(self), camera=(), geolocation=()"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn header_of(response: &Response, name: header::HeaderName) -> &str {
        response.headers().get(name).unwrap().to_str().unwrap()
    }

    #[tokio::test]
    async fn index_is_the_page_with_strict_headers() {
        let response = index().await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header_of(&response, header::CONTENT_TYPE), "text/html; charset=utf-8");
        assert_eq!(header_of(&response, header::CACHE_CONTROL), "no-cache");
        let csp = header_of(&response, header::CONTENT_SECURITY_POLICY).to_string();
        assert!(csp.contains("script-src 'self';"), "{csp}");
        assert!(csp.contains("connect-src 'self' ws: wss:"), "{csp}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
        let body = body_of(response).await;
        assert!(body.contains(r#"<script type="module" src="/assets/app.js">"#));
    }

    /// The JavaScript files of the client and the page, each by name.
    const JS_FILES: [&str; 16] = [
        "voxgate-client.js",
        "voxgate-protocol.js",
        "voxgate-server-events.js",
        "voxgate-tool-calls.js",
        "voxgate-microphone.js",
        "voxgate-audio.js",
        "pcm-capture-worklet.js",
        "app.js",
        "dom.js",
        "errors-view.js",
        "audio-controls.js",
        "transcript-view.js",
        "activity-view.js",
        "sources-view.js",
        "confirm-dialog.js",
        "labels.js",
    ];

    #[tokio::test]
    async fn modules_and_worklet_are_javascript() {
        for name in JS_FILES {
            let response = asset(Path(name.to_string())).await;
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert_eq!(header_of(&response, header::CONTENT_TYPE), "text/javascript; charset=utf-8", "{name}");
            assert_eq!(header_of(&response, header::CACHE_CONTROL), "no-cache", "{name}");
        }
        let css = asset(Path("style.css".to_string())).await;
        assert_eq!(header_of(&css, header::CONTENT_TYPE), "text/css; charset=utf-8");
        let client = body_of(asset(Path("voxgate-client.js".to_string())).await).await;
        assert!(client.contains("export class VoxgateClient extends EventTarget"));
    }

    #[tokio::test]
    async fn unknown_files_and_traversal_are_404() {
        for name in ["nope.js", "../Cargo.toml", "..%2FCargo.toml", ""] {
            let response = asset(Path(name.to_string())).await;
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{name}");
        }
    }

    /// Every file the page and modules reference is embedded, and the page has no inline script or
    /// style (the CSP would block them).
    #[test]
    fn references_resolve_and_nothing_is_inline() {
        let page = INDEX.body;
        for reference in ["/assets/app.js", "/assets/style.css", "/assets/favicon.svg"] {
            assert!(page.contains(reference), "{reference}");
            assert!(find(reference.trim_start_matches("/assets/")).is_some(), "{reference}");
        }
        assert!(!page.contains("<script>") && !page.contains(" style=") && !page.contains("<style"));
        assert!(!page.contains(" onclick=") && !page.contains(" onload=") && !page.contains("javascript:"));
        for asset in ASSETS {
            for import in asset.body.lines().filter_map(|l| l.split("from \"./").nth(1)) {
                let file = import.split('"').next().unwrap();
                assert!(find(file).is_some(), "{} imports {file}", asset.name);
            }
            if asset.name != "favicon.svg" {
                // No CDN, no external font: nothing outside the machine is reachable in a hospital.
                assert!(!asset.body.contains("http://") && !asset.body.contains("https://"), "{}", asset.name);
            }
        }
    }

    /// Every file under `assets/` is embedded and served: a new module cannot be left out.
    #[test]
    fn every_file_in_the_assets_folder_is_served() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut served: Vec<String> = ASSETS.iter().map(|asset| asset.name.to_string()).collect();
        served.sort();
        assert_eq!(names, served);
        let js: Vec<&String> = names.iter().filter(|name| name.ends_with(".js")).collect();
        assert_eq!(js.len(), JS_FILES.len(), "{js:?}");
        assert!(JS_FILES.iter().all(|name| names.iter().any(|n| n == name)));
    }

    /// The routes answer over real HTTP when merged into a router with state.
    #[tokio::test]
    async fn routes_serve_over_http() {
        let app: Router<()> = routes::<()>();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let page = reqwest::get(format!("http://{addr}/")).await.unwrap();
        assert_eq!(page.status(), 200);
        assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));
        let worklet = reqwest::get(format!("http://{addr}/assets/pcm-capture-worklet.js")).await.unwrap();
        assert_eq!(worklet.headers()["content-type"], "text/javascript; charset=utf-8");
        assert!(worklet.text().await.unwrap().contains("registerProcessor(\"voxgate-pcm-capture\""));
        let missing = reqwest::get(format!("http://{addr}/assets/missing.js")).await.unwrap();
        assert_eq!(missing.status(), 404);
        server.abort();
    }
}
