//! The console as a browser's requests reach it: reqwest as the HTTP client (no
//! redirect followed, so a test sees each 303 and its `Location`), scraper to
//! read a page's marked elements (`data-field`, a row's `data-{attr}`), and
//! eventsource-stream to read the tail's Server-Sent Events.

use std::net::SocketAddr;
use std::time::Duration;

use eventsource_stream::{EventStream, Eventsource as _};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use reqwest::{Method, redirect};
use scraper::{ElementRef, Html, Selector};

pub use eventsource_stream::Event;

/// How long an answer may take: far past any page's 10-second deadline.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// An answer: its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn page(&self) -> Html {
        Html::parse_document(&self.body)
    }

    /// The text of the first element marked `data-field="name"`.
    pub fn field(&self, name: &str) -> Option<String> {
        self.page().select(&marked(name)).next().map(|e| text(&e))
    }

    /// The machine-readable value (`value="…"`, an amount's minor units) of the
    /// first element marked `data-field="name"`; `None` if it has none (a limit
    /// that is none).
    pub fn value(&self, name: &str) -> Option<i64> {
        let page = self.page();
        let element = page.select(&marked(name)).next()?;
        element.value().attr("value")?;
        Some(number(&element, name))
    }

    /// Each table row marked `data-{attr}="id"`: its id, and the text of the
    /// element in it marked `data-field="name"` for each of `names`.
    pub fn rows(&self, attr: &str, names: &[&str]) -> Vec<(u64, Vec<String>)> {
        self.each_row(attr, names, |cell, _| text(cell))
    }

    /// Each table row marked `data-{attr}="id"`: its id, and the value of the
    /// element in it marked `data-field="name"` for each of `names`.
    pub fn values(&self, attr: &str, names: &[&str]) -> Vec<(u64, Vec<i64>)> {
        self.each_row(attr, names, number)
    }

    fn each_row<T>(
        &self,
        attr: &str,
        names: &[&str],
        read: impl Fn(&ElementRef<'_>, &str) -> T,
    ) -> Vec<(u64, Vec<T>)> {
        let page = self.page();
        let rows = selector(&format!("tr[data-{attr}]"));
        page.select(&rows)
            .map(|row| {
                let id = row.value().attr(&format!("data-{attr}")).unwrap();
                let cells = names
                    .iter()
                    .map(|name| {
                        let cell = row.select(&marked(name)).next();
                        read(
                            &cell.unwrap_or_else(|| panic!("row {id} has no {name}")),
                            name,
                        )
                    })
                    .collect();
                (id.parse().unwrap(), cells)
            })
            .collect()
    }

    /// The text of each element `css` selects.
    pub fn texts(&self, css: &str) -> Vec<String> {
        self.page()
            .select(&selector(css))
            .map(|e| text(&e))
            .collect()
    }

    /// The elements `css` selects: the value of each one's attribute `name`.
    pub fn attrs(&self, css: &str, name: &str) -> Vec<Option<String>> {
        self.page()
            .select(&selector(css))
            .map(|e| e.value().attr(name).map(str::to_owned))
            .collect()
    }

    /// The address the element with `id="{id}"` links to.
    pub fn link(&self, id: &str) -> Option<String> {
        let page = self.page();
        let element = page.select(&selector(&format!("#{id}"))).next()?;
        element.value().attr("href").map(str::to_owned)
    }
}

fn selector(css: &str) -> Selector {
    Selector::parse(css).unwrap_or_else(|e| panic!("{css}: {e}"))
}

fn marked(name: &str) -> Selector {
    selector(&format!("[data-field=\"{name}\"]"))
}

/// An element's text, its runs of white space made one space, as a person
/// reads it.
fn text(element: &ElementRef<'_>) -> String {
    let text: String = element.text().collect();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn number(element: &ElementRef<'_>, name: &str) -> i64 {
    let value = element.value().attr("value");
    let value = value.unwrap_or_else(|| panic!("{name} has no value: {}", element.html()));
    value
        .parse()
        .unwrap_or_else(|e| panic!("{name}'s value {value:?}: {e}"))
}

/// A request to the console at `addr`: `headers` as given (a `Host` among them
/// replaces the address's), and a form `body` if one is given.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> reqwest::RequestBuilder {
    // The service's reqwest (its deliveries) brings no TLS provider of its own
    // (`rustls-no-provider`), and features are the crate's, so this one has none
    // either: the process's is ring, as the service's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .timeout(ANSWER_WITHIN)
        .build()
        .unwrap();
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client.request(method, format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if body.is_empty() {
        request
    } else {
        request
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body.to_owned())
    }
}

/// Sends one request and reads its whole answer.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let answer = request(addr, method, path, headers, body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    Answer {
        status: answer.status().as_u16(),
        headers: answer.headers().clone(),
        body: answer.text().await.unwrap(),
    }
}

pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    send(addr, "GET", path, headers, "").await
}

/// A stream of Server-Sent Events, read event by event.
pub struct Events {
    pub status: u16,
    events: EventStream<BoxStream<'static, reqwest::Result<bytes::Bytes>>>,
}

impl Events {
    pub async fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Self {
        let answer = request(addr, "GET", path, headers, "")
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        Self {
            status: answer.status().as_u16(),
            events: answer.bytes_stream().boxed().eventsource(),
        }
    }

    /// The next event that carries data, within `within`; `None` if the stream
    /// ended or broke, or none came.
    pub async fn next(&mut self, within: Duration) -> Option<Event> {
        tokio::time::timeout(within, self.events.next())
            .await
            .ok()
            .flatten()?
            .ok()
    }
}
