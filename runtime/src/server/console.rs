//! The web console (`web/` at the repository root), embedded in the binary: `/`
//! redirects to `/console/`, which serves `web/index.html`, and `/console/{path}` the
//! stylesheet and the JavaScript modules, each with its content type and a strict
//! Content-Security-Policy (only this origin's scripts, styles and connections; no
//! inline script, no frames, no plugins). No key is needed for the files: the
//! console signs in with an API key against the API like any client.

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_host_api::Code;

use super::error::HttpError;

/// The console's files: path under `web/`, content type, contents.
pub const FILES: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../../../web/index.html")),
    ("console.css", "text/css; charset=utf-8", include_str!("../../../web/console.css")),
    ("js/api.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/api.js")),
    ("js/app.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/app.js")),
    ("js/charts.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/charts.js")),
    ("js/digits.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/digits.js")),
    ("js/functions.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/functions.js")),
    ("js/live.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/live.js")),
    ("js/similarity.js", "text/javascript; charset=utf-8", include_str!("../../../web/js/similarity.js")),
];

/// The console's Content-Security-Policy.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /`: to the console.
pub async fn root() -> Response {
    (StatusCode::FOUND, [(LOCATION, "/console/")]).into_response()
}

/// `GET /console/`: the page.
pub async fn index() -> Response {
    file("index.html")
}

/// `GET /console/{path}`: a file of the console, or 404.
pub async fn asset(Path(path): Path<String>) -> Response {
    file(&path)
}

fn file(path: &str) -> Response {
    let Some((_, content_type, body)) = FILES.iter().find(|(p, _, _)| *p == path) else {
        return HttpError::new(Code::NotFound, format!("no console file {path:?}")).into_response();
    };
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (HeaderName::from_static("content-security-policy"), HeaderValue::from_static(CSP)),
        (HeaderName::from_static("x-content-type-options"), HeaderValue::from_static("nosniff")),
        (HeaderName::from_static("referrer-policy"), HeaderValue::from_static("no-referrer")),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, *body).into_response()
}

#[cfg(test)]
mod tests {
    use super::FILES;

    /// Every file under `web/` is served, so a new one is never forgotten.
    #[test]
    fn every_file_of_web_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(p, _, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }
}
