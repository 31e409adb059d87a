//! A plain HTTP client for the console, over a TCP connection: HTTP/1.0, so each
//! answer ends with its connection and none is chunked.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

/// An answer: its status, headers (names lower-case) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The text of the element marked `data-field="name"` (the first one).
    pub fn field(&self, name: &str) -> Option<String> {
        let marker = format!("data-field=\"{name}\"");
        let after = self.body.split_once(&marker)?.1;
        let text = after.split_once('>')?.1.split_once('<')?.0;
        Some(text.trim().to_owned())
    }

    /// Each table row marked `data-{attr}="id"`: its id, and the text of the
    /// elements in it marked `data-field="name"` for each of `names`.
    pub fn rows(&self, attr: &str, names: &[&str]) -> Vec<(u64, Vec<String>)> {
        let marker = format!("<tr data-{attr}=\"");
        self.body
            .split(&marker)
            .skip(1)
            .map(|row| {
                let row = row.split_once("</tr>").map_or(row, |(r, _)| r);
                let id = row.split_once('"').unwrap().0.parse().unwrap();
                let fields = names
                    .iter()
                    .map(|name| {
                        let marker = format!("data-field=\"{name}\"");
                        let after = row.split_once(&marker).unwrap().1;
                        after
                            .split_once('>')
                            .unwrap()
                            .1
                            .split_once('<')
                            .unwrap()
                            .0
                            .trim()
                            .to_owned()
                    })
                    .collect();
                (id, fields)
            })
            .collect()
    }

    /// The address the element with `id="{id}"` links to, unescaped.
    pub fn link(&self, id: &str) -> Option<String> {
        let marker = format!("id=\"{id}\"");
        let (before, _) = self.body.split_once(&marker)?;
        let href = before.rsplit_once("href=\"")?.1.split_once('"')?.0;
        Some(href.replace("&#38;", "&").replace("&amp;", "&"))
    }
}

fn request_text(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let mut text = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        let _ = write!(text, "{name}: {value}\r\n");
    }
    if !body.is_empty() {
        text.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    let _ = write!(text, "Content-Length: {}\r\n\r\n{body}", body.len());
    text
}

fn parse_head(head: &str) -> (u16, Vec<(String, String)>) {
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers)
}

/// Sends one request and reads its whole answer.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(addr).await.expect("the console answers");
    stream
        .write_all(request_text(addr, method, path, headers, body).as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let (status, headers) = parse_head(head);
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    send(addr, "GET", path, headers, "").await
}

/// A stream of Server-Sent Events, read event by event.
pub struct Events {
    reader: BufReader<TcpStream>,
    pub status: u16,
}

/// One event: its `id`, `event` name and `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: Option<String>,
    pub name: Option<String>,
    pub data: String,
}

impl Events {
    pub async fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Self {
        let mut stream = TcpStream::connect(addr).await.expect("the console answers");
        stream
            .write_all(request_text(addr, "GET", path, headers, "").as_bytes())
            .await
            .unwrap();
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let (status, _) = parse_head(&head);
        Self { reader, status }
    }

    /// The next event that carries data, within `within`; `None` if the stream
    /// ended or none came.
    pub async fn next(&mut self, within: Duration) -> Option<Event> {
        tokio::time::timeout(within, self.read())
            .await
            .ok()
            .flatten()
    }

    async fn read(&mut self) -> Option<Event> {
        let mut event = Event {
            id: None,
            name: None,
            data: String::new(),
        };
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if event.data.is_empty() {
                    event.id = None;
                    event.name = None;
                    continue;
                }
                return Some(event);
            }
            match line.split_once(':') {
                Some(("id", v)) => event.id = Some(v.trim().to_owned()),
                Some(("event", v)) => event.name = Some(v.trim().to_owned()),
                Some(("data", v)) => event.data.push_str(v.trim_start()),
                _ => {}
            }
        }
    }
}
