//! The HTTP side of `serve`: a small synchronous server that answers `GET /metrics`
//! (and `/` with a link) from the registry the tracing thread fills, and nothing else.
//!
//! Each connection gets its own short-lived thread with one deadline for the whole
//! exchange, so a client that is slow, idle, or never reads its answer holds only its
//! own thread, for at most [`DEADLINE`], and never the tracing thread: that one only
//! updates the metrics, which an encode locks one histogram at a time. At most
//! [`MAX_CLIENTS`] connections are served at once; more are closed at once.
//!
//! The deadline is the exchange's, not each read's or write's: with a timeout per call,
//! a client that sends its request (or reads the answer) a byte every few seconds kept
//! its thread for hours, and [`MAX_CLIENTS`] such clients refused every scrape.

use crate::sink::metrics::{openmetrics, prometheus_text};
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a client may take to send its request or read the answer.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// The largest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// A bound listener, not yet serving: bind before dropping privileges.
pub struct Server {
    listener: TcpListener,
    /// The whole exchange's limit: [`DEADLINE`] but in tests.
    deadline: Duration,
}

impl Server {
    pub fn bind(addr: &str) -> Result<Server, ServeError> {
        let listener = TcpListener::bind(addr).map_err(|source| ServeError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        Ok(Server {
            listener,
            deadline: DEADLINE,
        })
    }

    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serve on a thread of its own until the process ends.
    pub fn spawn(self, registry: Arc<Registry>) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("ntprof-http".into())
            .spawn(move || self.run(registry))
            .map(|_| ())
    }

    fn run(self, registry: Arc<Registry>) {
        let busy = Arc::new(AtomicUsize::new(0));
        for conn in self.listener.incoming() {
            let Ok(stream) = conn else { continue };
            if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                busy.fetch_sub(1, Ordering::AcqRel);
                drop(stream);
                continue;
            }
            let registry = Arc::clone(&registry);
            let done = Arc::clone(&busy);
            let until = Instant::now() + self.deadline;
            let spawned = std::thread::Builder::new()
                .name("ntprof-http-client".into())
                .spawn(move || {
                    let _ = answer(Timed { stream, until }, &registry);
                    done.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Metrics { openmetrics: bool },
    Index,
    Refused(u16, &'static str),
}

/// A connection whose every read and write must end by `until`: each call waits at
/// most what is left, and none starts once it has passed.
struct Timed {
    stream: TcpStream,
    until: Instant,
}

impl Timed {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        self.stream.read(buf)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

fn answer(mut stream: Timed, registry: &Registry) -> std::io::Result<()> {
    let asked = match read_head(&mut stream) {
        Ok(head) => parse(&head),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            Asked::Refused(431, "request head too large")
        }
        Err(e) => return Err(e),
    };
    let (status, kind, body) = match asked {
        Asked::Metrics { openmetrics: true } => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            openmetrics(registry),
        ),
        Asked::Metrics { openmetrics: false } => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            prometheus_text(registry),
        ),
        Asked::Index => (
            200,
            "text/html; charset=utf-8",
            "<html><head><title>ntprof-perf</title></head><body><h1>ntprof-perf</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n".to_string(),
        ),
        Asked::Refused(code, why) => (code, "text/plain; charset=utf-8", format!("{why}\n")),
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// The request line and headers, up to the blank line; `InvalidData` past
/// [`MAX_HEAD`].
fn read_head(stream: &mut impl Read) -> std::io::Result<String> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn parse(head: &str) -> Asked {
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (first.next(), first.next(), first.next())
    else {
        return Asked::Refused(400, "bad request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Asked::Refused(400, "HTTP/1.x only");
    }
    let mut openmetrics = false;
    for h in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = h.split_once(':') else {
            return Asked::Refused(400, "bad header");
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "content-length" if value != "0" => return Asked::Refused(413, "no request bodies"),
            "transfer-encoding" => return Asked::Refused(413, "no request bodies"),
            "accept" => openmetrics = value.contains("application/openmetrics-text"),
            _ => {}
        }
    }
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Asked::Metrics { openmetrics },
        ("GET", "/") => Asked::Index,
        (_, "/metrics" | "/") => Asked::Refused(405, "only GET"),
        _ => Asked::Refused(404, "not found: try /metrics"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients that send their request a byte every 50 ms take every slot; each is cut
    /// at the deadline, so a scrape is answered soon after. (With a timeout per read,
    /// each would have held its slot until its head passed [`MAX_HEAD`]: 7 minutes.)
    #[test]
    fn clients_that_drip_their_request_are_cut_at_the_deadline() {
        let mut server = Server::bind("127.0.0.1:0").unwrap();
        server.deadline = Duration::from_millis(300);
        let addr = server.local_addr().unwrap();
        server.spawn(Arc::new(Registry::default())).unwrap();
        let t0 = Instant::now();
        let drippers: Vec<_> = (0..MAX_CLIENTS)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"G").unwrap();
                std::thread::spawn(move || {
                    while t0.elapsed() < Duration::from_secs(20) {
                        std::thread::sleep(Duration::from_millis(50));
                        if s.write_all(b"X").is_err() {
                            return true;
                        }
                    }
                    false
                })
            })
            .collect();
        let scrape = || -> Option<String> {
            let mut s = TcpStream::connect(addr).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            Some(out).filter(|o| o.starts_with("HTTP/1.1 200"))
        };
        let answered = std::iter::repeat_with(|| {
            std::thread::sleep(Duration::from_millis(100));
            scrape()
        })
        .take_while(|_| t0.elapsed() < Duration::from_secs(15))
        .any(|a| a.is_some());
        assert!(
            answered,
            "no scrape answered while the drippers held every slot"
        );
        for d in drippers {
            assert!(d.join().unwrap(), "a dripper was never cut off");
        }
    }

    #[test]
    fn only_get_of_metrics_and_the_index_is_answered() {
        let get = |path: &str, extra: &str| {
            parse(&format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n"))
        };
        assert_eq!(get("/metrics", ""), Asked::Metrics { openmetrics: false });
        assert_eq!(
            get(
                "/metrics",
                "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n"
            ),
            Asked::Metrics { openmetrics: true }
        );
        assert_eq!(get("/", ""), Asked::Index);
        assert_eq!(
            get("/admin", ""),
            Asked::Refused(404, "not found: try /metrics")
        );
        assert_eq!(
            parse("POST /metrics HTTP/1.1\r\n\r\n"),
            Asked::Refused(405, "only GET")
        );
        assert_eq!(
            get("/metrics", "Content-Length: 5\r\n"),
            Asked::Refused(413, "no request bodies")
        );
        assert_eq!(
            parse("garbage\r\n\r\n"),
            Asked::Refused(400, "bad request line")
        );
    }
}
