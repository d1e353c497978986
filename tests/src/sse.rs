//! A blocking client of server-sent events (the live console's feed,
//! `GET /v1/devices/{index}/live`; the streamed generations of `POST .../generate_stream`
//! and the OpenAI-compatible endpoints): [`EventStream::open`] or [`EventStream::post`],
//! and one event at a time from [`EventStream::next_event`], each an event name with its
//! JSON data (or [`EventStream::next_data`], its raw text: OpenAI's stream ends with
//! `data: [DONE]`). Dropping the stream closes the connection.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::Value;

use crate::Server;

/// An open event stream.
pub struct EventStream {
    lines: Box<dyn BufRead + Send>,
}

impl EventStream {
    /// Opens `path` with `key`; on a status other than 200, that status and the body.
    pub fn open(server: &Server, path: &str, key: Option<&str>) -> Result<EventStream, (u16, Value)> {
        Self::send(server, "GET", path, key, None)
    }

    /// POSTs the JSON `body` to `path` with `key`; on a status other than 200, that
    /// status and the body.
    pub fn post(server: &Server, path: &str, key: &str, body: &Value) -> Result<EventStream, (u16, Value)> {
        Self::send(server, "POST", path, Some(key), Some(body))
    }

    fn send(
        server: &Server,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Result<EventStream, (u16, Value)> {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(300)))
            .build();
        let agent = ureq::Agent::new_with_config(config);
        let mut request = ureq::http::Request::builder().method(method).uri(format!("{}{path}", server.url));
        if let Some(k) = key {
            request = request.header("authorization", format!("Bearer {k}"));
        }
        let response = match body {
            None => agent.run(request.body(()).expect("request")),
            Some(body) => {
                let request = request.header("content-type", "application/json");
                agent.run(request.body(serde_json::to_vec(body).expect("json")).expect("request"))
            }
        };
        let response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let content_type =
            response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let body = response.into_body().into_with_config().limit(u64::MAX).reader();
        let mut lines = BufReader::new(body);
        if status != 200 {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut lines, &mut text);
            return Err((status, serde_json::from_str(&text).unwrap_or(Value::String(text))));
        }
        assert!(content_type.starts_with("text/event-stream"), "content type {content_type:?}");
        Ok(EventStream { lines: Box::new(lines) })
    }

    /// The next event with data (comments and keep-alives skipped); `None` when the
    /// stream ends.
    pub fn next_event(&mut self) -> Option<(String, Value)> {
        let (name, data) = self.next_data()?;
        let value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("event {name}: {e}: {data}"));
        Some((name, value))
    }

    /// The next event with data, its data as text; `None` when the stream ends.
    pub fn next_data(&mut self) -> Option<(String, String)> {
        let (mut name, mut data) = (String::from("message"), String::new());
        loop {
            let mut line = String::new();
            if self.lines.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !data.is_empty() {
                    return Some((name, data));
                }
                name = "message".into();
            } else if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
    }
}
