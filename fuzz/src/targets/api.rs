//! The control API's requests (`pacer run --api-socket`): any bytes as an
//! HTTP request, and any body as a `set` request. Invariants: a request
//! taken is within the limits; a path decodes back from its encoding; a
//! `set` body taken has a key; a request whole in the buffer is whole in
//! any longer buffer that starts with it, and its length (where a
//! pipelined request after it starts) is within the buffer.

use crate::driver::Target;
use vmm::api::http::{parse_request, percent_decode, percent_encode, Parsed, MAX_BODY_BYTES};
use vmm::api::set::parse_body;

pub struct ApiTarget;

impl ApiTarget {
    pub fn new() -> ApiTarget {
        ApiTarget
    }
}

impl Default for ApiTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl Target for ApiTarget {
    fn name(&self) -> &'static str {
        "api"
    }

    fn max_len(&self) -> usize {
        // Past both limits, so that refusals are reached.
        32 * 1024
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        let set = br#"{"target": "web/1", "set": {"affinity": "0-1", "priority": 20}}"#;
        let mut post = format!(
            "POST /api/v1/set HTTP/1.1\r\nHost: pacer\r\nContent-Length: {}\r\n\r\n",
            set.len()
        )
        .into_bytes();
        post.extend_from_slice(set);
        vec![
            b"GET /api/v1/stats?vm=web%2F1&x HTTP/1.1\r\nHost: pacer\r\n\r\n".to_vec(),
            b"GET /api/v1/status?after=12 HTTP/1.1\r\n\r\n".to_vec(),
            b"POST /api/v1/vms/web/pause HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_vec(),
            post,
            set.to_vec(),
        ]
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        // Any bytes as a `set` body.
        if let Ok(req) = parse_body(data) {
            if req.pairs.is_empty() {
                return Err("a set request without keys was taken".into());
            }
        }
        match parse_request(data) {
            Parsed::Done(req) => {
                if req.body.len() > MAX_BODY_BYTES {
                    return Err(format!("a body of {} bytes was taken", req.body.len()));
                }
                // Where the next pipelined request starts: within the bytes.
                if req.len > data.len() || req.len < req.body.len() {
                    return Err(format!("a request of {} bytes in {}", req.len, data.len()));
                }
                if percent_decode(&percent_encode(&req.path)) != req.path {
                    return Err(format!("{:?} does not survive its encoding", req.path));
                }
                let _ = parse_body(&req.body);
                // More bytes after a whole request change nothing.
                let mut longer = data.to_vec();
                longer.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
                match parse_request(&longer) {
                    Parsed::Done(again) if again == req => Ok(()),
                    other => Err(format!("{req:?} then more bytes: {other:?}")),
                }
            }
            Parsed::Partial | Parsed::Refused(..) => Ok(()),
        }
    }
}
