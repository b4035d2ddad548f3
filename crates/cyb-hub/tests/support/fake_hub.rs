//! A Hugging Face–compatible hub in one thread, for tests without network: the revision API
//! (`/api/models/{repo}/revision/{rev}?blobs=true`) and file downloads
//! (`/{repo}/resolve/{commit}/{path}`, LFS files through a redirect like the real hub's CDN),
//! with switches for the failures a client must survive: a connection cut mid-body, a server
//! that ignores `Range`, a wrong listed sha256, a required token.
//!
//! Shared by the cyb-hub and cyb-cli tests (`#[path]`-included), so it only uses std and sha2.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

pub struct FakeFile {
    pub name: String,
    pub data: Vec<u8>,
    /// Listed with an `lfs` entry (sha256 and size), served through a redirect.
    pub lfs: bool,
    /// List this sha256 instead of the real one.
    pub wrong_sha256: bool,
}

impl FakeFile {
    pub fn new(name: &str, data: Vec<u8>, lfs: bool) -> FakeFile {
        FakeFile {
            name: name.into(),
            data,
            lfs,
            wrong_sha256: false,
        }
    }
}

pub struct FakeRepo {
    pub repo: String,
    pub commit: String,
    pub files: Vec<FakeFile>,
}

#[derive(Default, Clone)]
pub struct Behavior {
    /// The first download of each file sends its full Content-Length but closes the
    /// connection after this many body bytes.
    pub cut_first_after: Option<usize>,
    /// Answer `Range` requests with 200 and the whole file.
    pub ignore_range: bool,
    /// Answer 401 unless `Authorization: Bearer {token}` is sent.
    pub require_token: Option<String>,
    /// Serve this many bytes more than each file has (the listing keeps the true size).
    pub extra_bytes: usize,
}

#[derive(Clone, Debug)]
pub struct Request {
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    repos: Vec<FakeRepo>,
    behavior: Behavior,
    downloads: HashMap<String, usize>,
    requests: Vec<Request>,
}

pub struct FakeHub {
    pub url: String,
    state: Arc<Mutex<State>>,
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl FakeHub {
    pub fn start(repos: Vec<FakeRepo>, behavior: Behavior) -> FakeHub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            repos,
            behavior,
            downloads: HashMap::new(),
            requests: Vec::new(),
        }));
        let st = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let st = st.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &st);
                });
            }
        });
        FakeHub { url, state }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Requests whose target contains `part`.
    pub fn requests_to(&self, part: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.target.contains(part))
            .collect()
    }

    pub fn set_behavior(&self, b: Behavior) {
        self.state.lock().unwrap().behavior = b;
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

fn serve(mut stream: TcpStream, st: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let req = Request {
        target: target.clone(),
        headers,
    };
    let mut s = st.lock().unwrap();
    s.requests.push(req.clone());
    let b = s.behavior.clone();
    let path = target.split('?').next().unwrap_or("").to_string();
    let json = ("Content-Type", "application/json".to_string());

    if !path.starts_with("/cdn/") {
        if let Some(tok) = &b.require_token {
            if req.header("authorization") != Some(&format!("Bearer {tok}")) {
                return respond(
                    &mut stream,
                    "401 Unauthorized",
                    &[json],
                    br#"{"error":"Invalid credentials"}"#,
                );
            }
        }
    }
    let not_found =
        |stream: &mut TcpStream| respond(stream, "404 Not Found", &[], b"Repository not found");

    if let Some(rest) = path.strip_prefix("/api/models/") {
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let [org, name, "revision", rev] = parts.as_slice() else {
            return not_found(&mut stream);
        };
        let rev = decode(rev);
        let Some(repo) = s.repos.iter().find(|r| r.repo == format!("{org}/{name}")) else {
            return not_found(&mut stream);
        };
        if rev != "main" && rev != repo.commit {
            return not_found(&mut stream);
        }
        let siblings: Vec<String> = repo
            .files
            .iter()
            .map(|f| {
                let sha = if f.wrong_sha256 {
                    sha256_hex(b"something else")
                } else {
                    sha256_hex(&f.data)
                };
                let blob_id = &sha256_hex(f.name.as_bytes())[..40];
                if f.lfs {
                    format!(
                        r#"{{"rfilename":"{}","blobId":"{blob_id}","size":{},"lfs":{{"sha256":"{sha}","size":{},"pointerSize":130}}}}"#,
                        f.name,
                        f.data.len(),
                        f.data.len()
                    )
                } else {
                    format!(r#"{{"rfilename":"{}","blobId":"{blob_id}","size":{}}}"#, f.name, f.data.len())
                }
            })
            .collect();
        let body = format!(
            r#"{{"id":"{}","sha":"{}","siblings":[{}]}}"#,
            repo.repo,
            repo.commit,
            siblings.join(",")
        );
        return respond(&mut stream, "200 OK", &[json], body.as_bytes());
    }

    // /{org}/{name}/resolve/{commit}/{path} or /cdn/{org}/{name}/{commit}/{path}
    let (cdn, rest) = match path.strip_prefix("/cdn/") {
        Some(r) => (true, r.to_string()),
        None => (false, path.trim_start_matches('/').to_string()),
    };
    let parts: Vec<&str> = rest.splitn(if cdn { 4 } else { 5 }, '/').collect();
    let (org, name, commit, file) = match (cdn, parts.as_slice()) {
        (true, [o, n, c, f]) => (*o, *n, *c, decode(f)),
        (false, [o, n, "resolve", c, f]) => (*o, *n, *c, decode(f)),
        _ => return not_found(&mut stream),
    };
    let Some(repo) = s.repos.iter().find(|r| r.repo == format!("{org}/{name}")) else {
        return not_found(&mut stream);
    };
    if commit != repo.commit && commit != "main" {
        return not_found(&mut stream);
    }
    let Some(f) = repo.files.iter().find(|f| f.name == file) else {
        return respond(&mut stream, "404 Not Found", &[], b"Entry not found");
    };
    if f.lfs && !cdn {
        let loc = format!("/cdn/{org}/{name}/{commit}/{}", f.name);
        return respond(
            &mut stream,
            "302 Found",
            &[("Location", loc), ("Content-Length", "0".into())],
            b"",
        );
    }
    let mut data = f.data.clone();
    data.extend(std::iter::repeat_n(0x5a, b.extra_bytes));
    let key = f.name.clone();
    let n = s.downloads.entry(key).or_insert(0);
    *n += 1;
    let first = *n == 1;
    drop(s);

    let range = req
        .header("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    let etag = ("ETag", format!("\"{}\"", sha256_hex(&data)));
    let (status, body, mut hdrs) = match range {
        Some(start) if !b.ignore_range => {
            if start >= data.len() {
                return respond(
                    &mut stream,
                    "416 Range Not Satisfiable",
                    &[("Content-Range", format!("bytes */{}", data.len()))],
                    b"",
                );
            }
            let hdrs = vec![(
                "Content-Range",
                format!("bytes {start}-{}/{}", data.len() - 1, data.len()),
            )];
            ("206 Partial Content", data[start..].to_vec(), hdrs)
        }
        _ => ("200 OK", data, Vec::new()),
    };
    hdrs.push(("Content-Length", body.len().to_string()));
    hdrs.push(etag);
    match b.cut_first_after {
        Some(cut) if first && cut < body.len() => {
            let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
            for (k, v) in &hdrs {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes())?;
            stream.write_all(&body[..cut])?;
            stream.flush()?;
            stream.shutdown(std::net::Shutdown::Both)
        }
        _ => respond(&mut stream, status, &hdrs, &body),
    }
}
