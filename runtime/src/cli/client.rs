//! A small blocking HTTP client for the CLI's remote commands (ureq, plain HTTP/1.1).
//!
//! Error responses of the server (`{"error", "code"}`) become `anyhow` errors that
//! quote the status, the code and the message.

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use ureq::http::{Method, Request};

/// Where the server is and which key to use.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// Server URL.
    #[arg(long, env = "SLUICE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key (a tenant's, or the admin key for `sluice tenants`).
    #[arg(long, env = "SLUICE_KEY", hide_env_values = true)]
    pub key: Option<String>,
}

/// A response: status, selected headers and body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_slice(&self.body).context("the server's response is not JSON")
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Fails unless the status is 2xx, with the server's message.
    pub fn ok(self) -> anyhow::Result<Reply> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        match self.json() {
            Ok(v) => bail!(
                "server answered {} ({}): {}",
                self.status,
                v["code"].as_str().unwrap_or("?"),
                v["error"].as_str().unwrap_or("(no message)")
            ),
            Err(_) => bail!("server answered {}: {}", self.status, String::from_utf8_lossy(&self.body)),
        }
    }
}

/// The client.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    key: Option<String>,
}

impl Client {
    pub fn new(args: &ClientArgs) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(600)))
            .build();
        Client {
            agent: ureq::Agent::new_with_config(config),
            base: args.url.trim_end_matches('/').to_owned(),
            key: args.key.clone(),
        }
    }

    /// Sends `method path` with an optional `(content type, body)`.
    pub fn send(&self, method: Method, path: &str, body: Option<(&str, Vec<u8>)>) -> anyhow::Result<Reply> {
        let url = format!("{}{path}", self.base);
        let mut builder = Request::builder().method(method.clone()).uri(&url);
        if let Some(key) = &self.key {
            builder = builder.header("authorization", format!("Bearer {key}"));
        }
        let result = match body {
            Some((content_type, bytes)) => self.agent.run(builder.header("content-type", content_type).body(bytes)?),
            None => self.agent.run(builder.body(())?),
        };
        let mut response = result.with_context(|| format!("{method} {url}"))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = response.body_mut().with_config().limit(1 << 30).read_to_vec()?;
        Ok(Reply { status, headers, body })
    }

    /// Sends JSON and expects a 2xx JSON (or empty) answer.
    pub fn json(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let body = body.map(|v| ("application/json", serde_json::to_vec(v).expect("JSON serialises")));
        let reply = self.send(method, path, body)?.ok()?;
        if reply.body.is_empty() { Ok(Value::Null) } else { reply.json() }
    }
}
