//! HTTP/1.1 framing for the control API: a request read from the front
//! of a buffer with `httparse` (hyper's parser) within fixed limits, and a
//! response written out. Connections are persistent as HTTP/1.1 has them
//! (RFC 9112 section 9): a request says how long it is (`Content-Length`,
//! no chunked bodies), so several may follow each other on one
//! connection, and [`Request::close`] says whether the client asked to
//! close after this one (`Connection: close`, or HTTP/1.0 without
//! `Connection: keep-alive`). The event stream is the one response
//! without an end: the last on its connection.
//!
//! Whatever the bytes, parsing ends in a request or in a refusal with a
//! status and a one-line reason: never a panic, never a wait for more
//! than the limits allow.

use std::fmt::Write as _;

/// Longest request head (request line and headers).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Longest request body.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Most headers in a request.
const MAX_HEADERS: usize = 32;

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query's `key=value` pairs, percent-decoded.
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Bytes the request took at the front of the buffer (head and body):
    /// where the next request on the connection starts.
    pub len: usize,
    /// The client asked to close the connection after this request.
    pub close: bool,
}

impl Request {
    /// The value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What a buffer holds so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole request yet (and within the limits).
    Partial,
    Done(Request),
    /// Refused: the status to answer with and why.
    Refused(u16, String),
}

/// Parse the request at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Parsed::Refused(
                431,
                format!("request head longer than {MAX_HEAD_BYTES} bytes"),
            )
        }
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Refused(431, format!("more than {MAX_HEADERS} headers"))
        }
        Err(e) => return Parsed::Refused(400, format!("malformed HTTP request: {e}")),
    };
    if head_len > MAX_HEAD_BYTES {
        return Parsed::Refused(
            431,
            format!("request head longer than {MAX_HEAD_BYTES} bytes"),
        );
    }
    let mut length: Option<usize> = None;
    let (mut asks_close, mut asks_keep_alive) = (false, false);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Refused(
                501,
                "chunked request bodies are not accepted; send Content-Length".into(),
            );
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            // Digits only: where the next request starts depends on it.
            let n = std::str::from_utf8(h.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok());
            match (n, length) {
                (None, _) => return Parsed::Refused(400, "Content-Length is not a number".into()),
                (Some(n), Some(m)) if n != m => {
                    return Parsed::Refused(
                        400,
                        format!("two Content-Length headers that differ ({m} and {n})"),
                    )
                }
                (Some(n), _) => length = Some(n),
            }
        }
        if h.name.eq_ignore_ascii_case("connection") {
            for token in String::from_utf8_lossy(h.value).split(',') {
                let token = token.trim();
                asks_close |= token.eq_ignore_ascii_case("close");
                asks_keep_alive |= token.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    let length = length.unwrap_or(0);
    // HTTP/1.1 keeps a connection unless told; HTTP/1.0 closes unless told.
    let close = asks_close || (req.version == Some(0) && !asks_keep_alive);
    if length > MAX_BODY_BYTES {
        return Parsed::Refused(
            413,
            format!("request body of {length} bytes, more than {MAX_BODY_BYTES}"),
        );
    }
    if buf.len() < head_len + length {
        return Parsed::Partial;
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Parsed::Refused(400, "malformed HTTP request line".into());
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Parsed::Done(Request {
        method: method.to_string(),
        path: percent_decode(path),
        query: query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect(),
        body: buf[head_len..head_len + length].to_vec(),
        len: head_len + length,
        close,
    })
}

/// `%XX` escapes and `+` (as in a form) decoded; anything invalid kept.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `%XX`-escape what is not unreserved (for a client's query).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec(value).unwrap_or_default();
        body.push(b'\n');
        Response {
            status,
            content_type: "application/json",
            body,
        }
    }

    /// A refusal: `{"error": "..."}` (a `pacer-api-error` document) with
    /// the reason on one line and the HTTP status.
    pub fn error(status: u16, why: &str) -> Response {
        use crate::documents::{with_header, API_ERROR, API_SCHEMA_VERSION};
        Response::json(
            status,
            &with_header(
                API_ERROR,
                API_SCHEMA_VERSION,
                serde_json::json!({ "error": crate::text::one_line(why), "status": status }),
            ),
        )
    }

    pub fn asset(content_type: &'static str, body: &'static str) -> Response {
        Response {
            status: 200,
            content_type,
            body: body.as_bytes().to_vec(),
        }
    }

    /// The whole response, head and body; `close`: the connection closes
    /// after it (said in `Connection`, as a keep-alive is said).
    pub fn to_bytes(&self, close: bool) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: {}\r\n\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len(),
            if close { "close" } else { "keep-alive" }
        )
        .into_bytes();
        head.extend_from_slice(&self.body);
        head
    }
}

/// The head of the event stream (server-sent events; no length, no end).
pub fn event_stream_head() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        .to_vec()
}

/// One server-sent event carrying `json` (a single line).
pub fn event(json: &str) -> Vec<u8> {
    format!("data: {json}\n\n").into_bytes()
}

/// The reason phrase of the statuses the API uses.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_requests_parse_and_partial_ones_wait() {
        let r = b"POST /api/v1/vms/a/pause?x=1&y=a%2Fb HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
        let Parsed::Done(req) = parse_request(r) else {
            panic!("{:?}", parse_request(r))
        };
        assert_eq!((req.len, req.close), (r.len(), false));
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/api/v1/vms/a/pause");
        assert_eq!(req.param("y"), Some("a/b"));
        assert_eq!(req.body, b"{}");
        assert_eq!(parse_request(&r[..r.len() - 1]), Parsed::Partial);
        assert_eq!(parse_request(b"GET / HT"), Parsed::Partial);
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        let refused = |b: &[u8]| match parse_request(b) {
            Parsed::Refused(s, why) => (s, why),
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(b"\x00\x01garbage\r\n\r\n").0, 400);
        let big = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY_BYTES + 1
        );
        assert_eq!(refused(big.as_bytes()).0, 413);
        let long = vec![b'a'; MAX_HEAD_BYTES + 1];
        assert_eq!(refused(&long).0, 431);
        assert_eq!(
            refused(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").0,
            400
        );
        assert_eq!(
            refused(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").0,
            501
        );
    }

    #[test]
    fn requests_follow_each_other_and_say_when_to_close() {
        let one = b"GET /api/v1/vms HTTP/1.1\r\n\r\n";
        let two = b"POST /api/v1/set HTTP/1.1\r\nContent-Length: 2\r\nConnection: Keep-Alive, close\r\n\r\n{}";
        let mut buf = one.to_vec();
        buf.extend_from_slice(two);
        let Parsed::Done(first) = parse_request(&buf) else {
            panic!("{:?}", parse_request(&buf))
        };
        assert_eq!((first.len, first.close), (one.len(), false));
        let Parsed::Done(second) = parse_request(&buf[first.len..]) else {
            panic!("{:?}", parse_request(&buf[first.len..]))
        };
        assert_eq!((second.len, second.close), (two.len(), true));
        assert_eq!(second.body, b"{}");
        let close = |b: &[u8]| match parse_request(b) {
            Parsed::Done(r) => r.close,
            other => panic!("{other:?}"),
        };
        assert!(close(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(!close(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!close(b"GET / HTTP/1.1\r\nConnection: upgrade\r\n\r\n"));
        assert!(close(b"GET / HTTP/1.1\r\nconnection: CLOSE\r\n\r\n"));
    }

    #[test]
    fn a_length_that_could_be_read_two_ways_is_refused() {
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 0\r\n\r\n{}",
            "POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
            "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
        ] {
            match parse_request(head.as_bytes()) {
                Parsed::Refused(400, _) => {}
                other => panic!("{head:?}: {other:?}"),
            }
        }
        let same = b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}";
        assert!(matches!(parse_request(same), Parsed::Done(_)));
    }

    #[test]
    fn responses_say_whether_the_connection_stays() {
        let text = |close| String::from_utf8(Response::error(400, "x").to_bytes(close)).unwrap();
        assert!(text(true).contains("\r\nConnection: close\r\n"));
        assert!(text(false).contains("\r\nConnection: keep-alive\r\n"));
    }

    #[test]
    fn escapes_round_trip() {
        for s in ["a/0", "0-1,3", "x y", "%zz", "é"] {
            assert_eq!(percent_decode(&percent_encode(s)), s);
        }
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        let r = Response::error(404, "no\nsuch VM").to_bytes(true);
        let text = String::from_utf8(r).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        // one_line escapes the newline: the JSON string holds `no\nsuch VM`.
        let body: serde_json::Value =
            serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["error"], "no\\nsuch VM", "{text}");
        assert_eq!(body["status"], 404);
        assert_eq!(body["schema"], crate::documents::API_ERROR);
    }
}
